#include "verbs/ibverbs/ib_context.h"

#include <algorithm>
#include <utility>

#include "verbs/ibverbs/device_selection.h"
#include "verbs/ibverbs/ib_completion_queue.h"
#include "verbs/ibverbs/ib_discovery.h"
#include "verbs/ibverbs/ib_protection_domain.h"
#include "verbs/ibverbs/ib_queue_pair.h"

namespace tensorverbs::verbs::ibverbs {
namespace {

constexpr std::uint8_t kMaxRdAtomic = 16;
constexpr std::uint32_t kRxeVendor = 0xFFFFFF;

Status check_range(const char* variable, int value, int lo, int hi) {
  if (value >= lo && value <= hi) return ok_status();
  return Status(Code::kInvalidArgument, std::string(variable) + "=" + std::to_string(value) +
                                            " is not valid: expected an integer in [" +
                                            std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

Status check_config(const VerbsConfig& config) {
  for (const Status& status : {check_range("RDMA_QP_PKEY_INDEX", config.pkey_index, 0, 65535),
                               check_range("RDMA_QP_QUEUE_DEPTH", config.queue_depth, 1, 65536),
                               check_range("RDMA_QP_TIMEOUT", config.timeout, 0, 31),
                               check_range("RDMA_QP_RETRY_COUNT", config.retry_cnt, 0, 7),
                               check_range("RDMA_QP_SL", config.sl, 0, 7),
                               check_range("RDMA_TRAFFIC_CLASS", config.traffic_class, 0, 255),
                               check_range("RDMA_GID_INDEX", config.gid_index, -1, 255),
                               check_range("RDMA_DEVICE_PORT", config.port, 0, 255)}) {
    if (!status.ok()) return status;
  }
  if (config.ib_windows != "auto" && config.ib_windows != "type2" &&
      config.ib_windows != "registration") {
    return Status(Code::kInvalidArgument, "TENSORVERBS_IB_WINDOWS='" + config.ib_windows +
                                              "' is not valid: expected auto, type2 or registration");
  }
  return ok_status();
}

}  // namespace

IbContext::IbContext(const Libibverbs& lib, ibv_context* context, DeviceAttr device, IbPort port,
                     IbCaps caps, VerbsConfig config)
    : lib_(lib),
      context_(context),
      device_(std::move(device)),
      port_(std::move(port)),
      caps_(caps),
      config_(std::move(config)) {}

IbContext::~IbContext() { lib_.close_device(context_); }

bool IbContext::type2_windows() const {
  switch (window_kind_.load()) {
    case WindowKind::kType2: return caps_.type2_windows;
    case WindowKind::kRegistration: return false;
    case WindowKind::kAuto: break;
  }
  return caps_.type2_windows && !caps_.is_rxe;
}

std::string IbContext::where() const {
  return device_.name + " port " + std::to_string(port_.port_num);
}

Result<std::shared_ptr<IbContext>> IbContext::open(const Libibverbs& lib,
                                                   const VerbsConfig& config) {
  if (Status status = check_config(config); !status.ok()) return status;
  const std::vector<DeviceAttr> devices = scan_devices(lib);
  if (devices.empty()) {
    return Status(Code::kUnavailable, "no RDMA devices (is an RDMA driver loaded? ibv_devices "
                                      "lists what libibverbs sees)");
  }
  Result<Selection> selected = select_device(devices, config);
  if (!selected.ok()) return selected.status();
  const Selection& sel = selected.value();
  Result<ibv_context*> opened = open_device_named(lib, sel.device.name);
  if (!opened.ok()) return opened.status();
  ibv_context* context = opened.value();
  const std::string where = sel.device.name + " port " + std::to_string(sel.port.port_num);
  auto fail = [&lib, context](Status status) {
    lib.close_device(context);
    return status;
  };

  ibv_device_attr dev{};
  ibv_port_attr port_attr{};
  IbPort port;
  port.port_num = static_cast<std::uint8_t>(sel.port.port_num);
  if (int rc = lib.query_device(context, &dev); rc != 0) {
    return fail(Status(Code::kUnavailable, "querying " + sel.device.name + ": " + errno_text(rc)));
  }
  if (int rc = lib.query_port(context, port.port_num, &port_attr); rc != 0) {
    return fail(Status(Code::kUnavailable, "querying " + where + ": " + errno_text(rc)));
  }
  if (config.pkey_index >= port_attr.pkey_tbl_len) {
    return fail(Status(Code::kInvalidArgument,
                       "RDMA_QP_PKEY_INDEX=" + std::to_string(config.pkey_index) +
                           " is out of range: the P_Key table of " + where + " has " +
                           std::to_string(port_attr.pkey_tbl_len) + " entries"));
  }
  if (config.queue_depth > dev.max_qp_wr) {
    return fail(Status(Code::kInvalidArgument,
                       "RDMA_QP_QUEUE_DEPTH=" + std::to_string(config.queue_depth) +
                           " exceeds max_qp_wr " + std::to_string(dev.max_qp_wr) + " of " +
                           sel.device.name));
  }
  port.gid_index = sel.gid.index;
  port.gid_text = sel.gid.gid;
  if (port.gid_index >= 0) {
    if (int rc = lib.query_gid(context, port.port_num, port.gid_index, &port.gid); rc != 0) {
      return fail(Status(Code::kUnavailable, "reading GID " + std::to_string(port.gid_index) +
                                                 " of " + where + ": " + errno_text(rc)));
    }
  }
  port.link_layer = port_attr.link_layer == IBV_LINK_LAYER_ETHERNET ? LinkLayer::kEthernet
                                                                     : LinkLayer::kInfiniBand;
  port.lid = port_attr.lid;
  port.mtu = static_cast<std::uint32_t>(sel.mtu);

  IbCaps caps;
  caps.max_cqe = dev.max_cqe;
  caps.max_qp_wr = dev.max_qp_wr;
  caps.max_msg_sz = sel.device.max_msg_sz;
  caps.rd_atomic = static_cast<std::uint8_t>(
      std::max(1, std::min({int{kMaxRdAtomic}, dev.max_qp_rd_atom, dev.max_qp_init_rd_atom})));
  caps.type2_windows = (dev.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A |
                                                IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
  caps.is_rxe = dev.vendor_id == kRxeVendor;
  if (config.ib_windows == "type2" && !caps.type2_windows) {
    return fail(Status(Code::kInvalidArgument, "TENSORVERBS_IB_WINDOWS=type2: " + sel.device.name +
                                                   " has no type 2 memory windows"));
  }
  auto opened_context = std::shared_ptr<IbContext>(
      new IbContext(lib, context, sel.device, std::move(port), caps, config));
  if (config.ib_windows == "type2") opened_context->set_window_kind(WindowKind::kType2);
  if (config.ib_windows == "registration") {
    opened_context->set_window_kind(WindowKind::kRegistration);
  }
  return opened_context;
}

Result<std::shared_ptr<ProtectionDomain>> IbContext::alloc_pd() {
  Result<std::shared_ptr<IbProtectionDomain>> pd = IbProtectionDomain::create(self());
  if (!pd.ok()) return pd.status();
  return std::shared_ptr<ProtectionDomain>(pd.take());
}

Result<std::shared_ptr<CompletionQueue>> IbContext::create_cq(int depth) {
  Result<std::shared_ptr<IbCompletionQueue>> cq = IbCompletionQueue::create(self(), depth);
  if (!cq.ok()) return cq.status();
  return std::shared_ptr<CompletionQueue>(cq.take());
}

Result<std::shared_ptr<QueuePair>> IbContext::create_qp(
    const std::shared_ptr<ProtectionDomain>& pd, const std::shared_ptr<CompletionQueue>& send_cq,
    const std::shared_ptr<CompletionQueue>& recv_cq, QpCaps caps) {
  auto ib_pd = std::dynamic_pointer_cast<IbProtectionDomain>(pd);
  auto ib_send = std::dynamic_pointer_cast<IbCompletionQueue>(send_cq);
  auto ib_recv = std::dynamic_pointer_cast<IbCompletionQueue>(recv_cq);
  if (!ib_pd || &ib_pd->context() != this) {
    return Status(Code::kInvalidArgument,
                  "the protection domain does not belong to this ibverbs context");
  }
  if (!ib_send || &ib_send->context() != this) {
    return Status(Code::kInvalidArgument, "the send CQ does not belong to this ibverbs context");
  }
  if (!ib_recv || &ib_recv->context() != this) {
    return Status(Code::kInvalidArgument,
                  "the receive CQ does not belong to this ibverbs context");
  }
  for (auto [what, value] : {std::pair{"max_send_wr", caps.max_send_wr},
                             std::pair{"max_recv_wr", caps.max_recv_wr}}) {
    if (value < 1 || value > caps_.max_qp_wr) {
      return Status(Code::kInvalidArgument,
                    std::string(what) + "=" + std::to_string(value) + " is outside [1, " +
                        std::to_string(caps_.max_qp_wr) + "] (max_qp_wr of " + device_.name + ")");
    }
  }
  Result<std::shared_ptr<IbQueuePair>> qp =
      IbQueuePair::create(self(), std::move(ib_pd), std::move(ib_send), std::move(ib_recv), caps);
  if (!qp.ok()) return qp.status();
  return std::shared_ptr<QueuePair>(qp.take());
}

}  // namespace tensorverbs::verbs::ibverbs
