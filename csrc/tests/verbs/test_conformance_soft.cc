// The conformance suite on the soft provider: "soft_shm" (one host: shared memory and the
// Unix socket) and "soft_tcp" (same_host = "no": everything over TCP).
#include "conformance.h"
#include "soft_param.h"

namespace tensorverbs::verbs::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Soft, Conformance, soft_params(), conformance_name);

}  // namespace
}  // namespace tensorverbs::verbs::testing
