// One tensor's bytes made ready for many sends at once (a broadcast's receivers, a batch of
// blocks of one buffer): registered once when large, else staged once into the registered
// pool, so that no send of them registers or stages its own; left as they are when they lie
// in the pool already, or when neither works (each send then stages its own copy).
#pragma once

#include "protocol/protocol_counters.h"
#include "protocol/registered_pool.h"
#include "protocol/tensor_value.h"
#include "verbs/provider.h"

namespace tensorverbs {

TensorValue register_once(TensorValue value, RegisteredPool& pool, verbs::ProtectionDomain& pd,
                          ProtocolCounters& counters);

}  // namespace tensorverbs
