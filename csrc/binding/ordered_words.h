// Words of a host buffer stored and loaded with full fences around them: what a seqlock
// over shared or registered memory needs on any CPU (a publication's sequence numbers,
// tensorverbs.one_sided.publisher), where numpy's stores promise no order.
#pragma once

#include <nanobind/nanobind.h>

namespace tensorverbs::binding {

void bind_ordered_words(nanobind::module_& m);

}  // namespace tensorverbs::binding
