// The verbs settings as Python gives them (RdmaConfig.to_core()'s dict) to the native core.
#pragma once

#include <nanobind/nanobind.h>

#include "verbs/provider.h"

namespace tensorverbs::binding {

verbs::VerbsConfig to_config(const nanobind::dict& d);

}  // namespace tensorverbs::binding
