#include "protocol/pending_recv.h"

#include "protocol/seconds.h"

namespace tensorverbs {

void PendingRecv::expire(double timeout) {
  const std::string where = progress();
  give_up(Status(Code::kDeadlineExceeded, what() + " timed out after " + seconds(timeout) + " s" +
                                              (where.empty() ? "" : " (" + where + ")")));
}

}  // namespace tensorverbs
