// The send completions of tensorverbs._core: SendLedger, SendTicket and SendCompletion for
// Python (the GIL released around every wait).
#pragma once

#include <nanobind/nanobind.h>

namespace tensorverbs::binding {

void bind_send_completion(nanobind::module_& m);

}  // namespace tensorverbs::binding
