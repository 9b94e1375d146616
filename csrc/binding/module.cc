// tensorverbs._core: converts between Python and the native core, nothing else.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <tuple>
#include <utility>
#include <vector>

#include "binding/byte_view.h"
#include "binding/py_ref.h"
#include "binding/future_recv.h"
#include "binding/ordered_words.h"
#include "binding/recv_handle.h"
#include "binding/row_access.h"
#include "binding/rendezvous_binding.h"
#include "binding/send_binding.h"
#include "binding/verbs_binding.h"
#include "core/build_info.h"
#include "protocol/channel_description.h"
#include "protocol/rdma_message.h"
#include "protocol/work_id.h"
#include "verbs/work.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using namespace tensorverbs;

// TensorMeta as Python passes and gets it: (dtype, shape, is_dead, nbytes).
using MetaTuple = std::tuple<std::int32_t, std::vector<std::int64_t>, bool, std::uint64_t>;

nb::dict to_dict(const BuildInfo& info) {
  nb::dict out;
  out["compiler"] = info.compiler;
  out["cxx_standard"] = info.cxx_standard;
  out["build_type"] = info.build_type;
  out["sanitizers"] = info.sanitizers;
  out["ibverbs"] = info.ibverbs;
  out["ibverbs_reason"] = info.ibverbs_reason;
  return out;
}

nb::bytes encode_message(std::uint8_t type, std::uint64_t request_index, std::string name,
                         std::int64_t step_id, std::uint64_t remote_addr, std::uint32_t rkey,
                         std::optional<MetaTuple> meta, std::int32_t error_code,
                         std::string error_message, std::uint32_t acked, const nb::bytes& payload,
                         std::vector<std::tuple<std::uint32_t, std::int64_t, std::string>> requests,
                         const std::vector<std::tuple<std::uint32_t, MetaTuple, nb::bytes>>&
                             inlines) {
  RdmaMessage message{static_cast<MessageType>(type),
                      request_index,
                      std::move(name),
                      step_id,
                      remote_addr,
                      rkey,
                      std::nullopt,
                      error_code,
                      std::move(error_message)};
  if (meta) {
    auto& [dtype, shape, is_dead, nbytes] = *meta;
    message.meta = TensorMeta{dtype, shape, is_dead, nbytes};
  }
  message.acked = acked;
  message.payload = static_cast<const std::uint8_t*>(payload.data());
  message.payload_size = payload.size();
  for (auto& [index, step, request_name] : requests) {
    message.requests.push_back(RequestEntry{index, step, std::move(request_name)});
  }
  for (const auto& [index, entry_meta, bytes] : inlines) {
    const auto& [dtype, shape, is_dead, nbytes] = entry_meta;
    if (bytes.size() != nbytes) {
      throw nb::value_error("an inline tensor's bytes disagree with its nbytes");
    }
    message.inlines.push_back(InlineEntry{index, TensorMeta{dtype, shape, is_dead, nbytes},
                                          static_cast<const std::uint8_t*>(bytes.data())});
  }
  std::array<std::uint8_t, kSlotBytes> slot{};
  const EncodeResult encoded = encode_into(message, slot.data());
  if (!encoded.error.empty()) throw nb::value_error(encoded.error.c_str());
  return nb::bytes(slot.data(), encoded.size);
}

nb::dict decode_message(const nb::bytes& data) {
  const DecodeResult decoded = decode(static_cast<const std::uint8_t*>(data.data()), data.size());
  nb::dict out;
  if (!decoded.message) {
    const MessageError& error = decoded.error;
    out["error"] = error.message;
    out["request_index"] = error.request_index;
    out["type"] = error.type ? nb::cast(static_cast<int>(*error.type)) : nb::none();
    return out;
  }
  const RdmaMessage& message = *decoded.message;
  out["error"] = nb::none();
  out["type"] = static_cast<int>(message.type);
  out["request_index"] = message.request_index;
  out["name"] = message.name;
  out["step_id"] = message.step_id;
  out["remote_addr"] = message.remote_addr;
  out["rkey"] = message.rkey;
  if (message.meta) {
    const TensorMeta& meta = *message.meta;
    out["meta"] = MetaTuple{meta.dtype, {meta.shape.begin(), meta.shape.end()}, meta.is_dead,
                            meta.nbytes};
  } else {
    out["meta"] = nb::none();
  }
  out["error_code"] = message.error_code;
  out["error_message"] = message.error_message;
  out["acked"] = message.acked;
  out["payload"] = nb::bytes(message.payload, message.payload_size);
  nb::list requests;
  for (const RequestEntry& request : message.requests) {
    requests.append(nb::make_tuple(request.index, request.step_id, request.name));
  }
  out["requests"] = requests;
  nb::list inlines;
  for (const InlineEntry& entry : message.inlines) {
    const TensorMeta& meta = entry.meta;
    inlines.append(nb::make_tuple(
        entry.index,
        MetaTuple{meta.dtype, {meta.shape.begin(), meta.shape.end()}, meta.is_dead, meta.nbytes},
        nb::bytes(entry.payload, meta.nbytes)));
  }
  out["inlines"] = inlines;
  return out;
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "tensorverbs' native core";
  // objects may legitimately outlive the interpreter's teardown (held by the core's threads)
  nb::set_leak_warnings(false);
  m.def(
      "build_info", [] { return to_dict(build_info()); },
      "How the core was built: compiler, cxx_standard, build_type, sanitizers, ibverbs "
      "(whether the ibverbs provider is built) and ibverbs_reason.");
  m.def("encode_message", &encode_message, "type"_a, "request_index"_a, "name"_a = "",
        "step_id"_a = 0, "remote_addr"_a = 0, "rkey"_a = 0, "meta"_a = nb::none(),
        "error_code"_a = 0, "error_message"_a = "", "acked"_a = 0, "payload"_a = nb::bytes("", 0),
        "requests"_a = std::vector<std::tuple<std::uint32_t, std::int64_t, std::string>>(),
        "inlines"_a = std::vector<std::tuple<std::uint32_t, MetaTuple, nb::bytes>>(),
        "The bytes of one control message (meta: (dtype, shape, is_dead, nbytes); requests: "
        "TENSOR_REQUESTS' (index, step_id, name) each; inlines: TENSOR_INLINES' (index, meta, "
        "bytes) each); ValueError if it cannot be encoded. For tests.");
  nb::enum_<MessageType>(m, "MessageType", "The control messages' types.", nb::is_arithmetic())
      .value("META_DATA_RESPONSE", MessageType::kMetaDataResponse)
      .value("TENSOR_RE_REQUEST", MessageType::kTensorReRequest)
      .value("TENSOR_REQUEST", MessageType::kTensorRequest)
      .value("ERROR_STATUS", MessageType::kErrorStatus)
      .value("RELEASE", MessageType::kRelease)
      .value("CANCEL", MessageType::kCancel)
      .value("TENSOR_INLINE", MessageType::kTensorInline)
      .value("TENSOR_REQUESTS", MessageType::kTensorRequests)
      .value("TENSOR_INLINES", MessageType::kTensorInlines);
  m.attr("SLOT_BYTES") = kSlotBytes;
  m.attr("HEADER_BYTES") = kHeaderBytes;
  m.attr("MAX_TAIL_BYTES") = kMaxTailBytes;
  m.attr("MAX_REQUEST_INDEX") = kMaxRequestIndex;
  m.attr("IMM_MESSAGE") = kImmMessage;
  m.attr("IMM_ACK") = kImmAck;
  m.attr("LOCAL_WRITE") = static_cast<std::uint32_t>(verbs::kLocalWrite);
  m.attr("REMOTE_WRITE") = static_cast<std::uint32_t>(verbs::kRemoteWrite);
  m.attr("REMOTE_READ") = static_cast<std::uint32_t>(verbs::kRemoteRead);
  m.attr("WR_RDMA_WRITE") = static_cast<int>(verbs::WrOpcode::kRdmaWrite);
  m.attr("WR_RDMA_WRITE_WITH_IMM") = static_cast<int>(verbs::WrOpcode::kRdmaWriteWithImm);
  m.attr("WR_RDMA_READ") = static_cast<int>(verbs::WrOpcode::kRdmaRead);
  m.attr("ROW_WINDOW_END") = tensorverbs::binding::kWindowEnd;
  m.def(
      "describe_channel",
      [](std::string provider, const nb::bytes& endpoint, std::uint64_t rx_addr, std::uint32_t rx_rkey,
         std::uint64_t rx_length, std::uint32_t slots, std::uint64_t max_message_bytes) {
        ChannelDescription d{std::move(provider),
                             std::string(static_cast<const char*>(endpoint.data()), endpoint.size()),
                             rx_addr, rx_rkey, rx_length, slots, max_message_bytes};
        const std::string bytes = d.serialize();
        return nb::bytes(bytes.data(), bytes.size());
      },
      "provider"_a, "endpoint"_a, "rx_addr"_a, "rx_rkey"_a, "rx_length"_a, "slots"_a,
      "max_message_bytes"_a, "A channel description's bytes (as GetRemoteAddress carries them).");
  m.def(
      "parse_channel",
      [](const nb::bytes& bytes) -> nb::object {
        const auto parsed = ChannelDescription::parse(
            std::string_view(static_cast<const char*>(bytes.data()), bytes.size()));
        if (!parsed.ok()) return nb::none();
        const ChannelDescription* d = &parsed.value();
        nb::dict out;
        out["provider"] = d->provider;
        out["endpoint"] = nb::bytes(d->endpoint.data(), d->endpoint.size());
        out["rx_addr"] = d->rx_addr;
        out["rx_rkey"] = d->rx_rkey;
        out["rx_length"] = d->rx_length;
        out["slots"] = d->slots;
        out["max_message_bytes"] = d->max_message_bytes;
        return out;
      },
      "bytes"_a, "A channel description as a dict, or None if the bytes are not one.");
  tensorverbs::binding::bind_byte_view(m);
  tensorverbs::binding::bind_ordered_words(m);
  tensorverbs::binding::bind_recv_handles(m);
  tensorverbs::binding::bind_rendezvous(m);
  tensorverbs::binding::bind_send_completion(m);
  tensorverbs::binding::bind_verbs(m);
  m.def(
      "shutdown",
      [] {
        tensorverbs::binding::stop_settler();
        tensorverbs::binding::stop_janitor();
      },
      "End the core's Python threads (at interpreter exit).");
  m.def("set_variant_settle", &tensorverbs::binding::set_variant_settle, "settle"_a,
        "How a parked recv's answer of DataType DT_VARIANT (a descriptor to act on at once, such "
        "as a relay's) settles its future as it comes, in the settler thread: settle(weakref to "
        "the future, code, message, dtype, shape, is_dead, payload); any other answer stays "
        "parked. Set once.");
  m.def("decode_message", &decode_message, "data"_a,
        "One control message as a dict; on a malformed message, error is its reason and "
        "request_index/type are set when attributable. For tests.");
}
