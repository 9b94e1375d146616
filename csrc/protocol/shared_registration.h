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

// `each` is the size of what one send of them takes (all of them for a broadcast, a block
// of a batch): registered when that is large enough, else staged (a copy costs less than
// registration there, and pool memory is what a peer on this host reaches directly).
TensorValue register_once(TensorValue value, std::size_t each, RegisteredPool& pool,
                          verbs::ProtectionDomain& pd, ProtocolCounters& counters);

}  // namespace tensorverbs
