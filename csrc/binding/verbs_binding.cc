#include "binding/verbs_binding.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "binding/byte_view.h"
#include "binding/gil_released.h"
#include "binding/py_ref.h"
#include "binding/row_access.h"
#include "binding/status_error.h"
#include "binding/verbs_config.h"
#include "verbs/provider.h"
#if TENSORVERBS_HAVE_IBVERBS
#include "verbs/ibverbs/device_selection.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace tensorverbs::binding {

namespace {

using namespace tensorverbs::verbs;

nb::dict describe(const DeviceAttr& device) {
  nb::list ports;
  for (const PortAttr& port : device.ports) {
    nb::list gids;
    for (const GidAttr& gid : port.gids) gids.append(nb::make_tuple(gid.index, gid.gid, gid.type));
    nb::dict p;
    p["port_num"] = port.port_num;
    p["state"] = port.state;
    p["active_mtu"] = port.active_mtu;
    p["max_mtu"] = port.max_mtu;
    p["link_layer"] = port.link_layer;
    p["lid"] = port.lid;
    p["gids"] = gids;
    ports.append(p);
  }
  nb::dict out;
  out["name"] = device.name;
  out["provider"] = device.provider;
  out["max_msg_sz"] = device.max_msg_sz;
  out["max_qp_wr"] = device.max_qp_wr;
  out["ports"] = ports;
  return out;
}

VerbsConfig config_of(const std::string& provider, const std::string& same_host) {
  VerbsConfig config;
  config.provider = provider;
  config.same_host = same_host;
  return config;
}

// A region and what keeps its memory (for register_memory: the caller's object).
struct Region {
  std::shared_ptr<MemoryRegion> region;
  std::shared_ptr<const void> memory;
};

}  // namespace

void bind_verbs(nb::module_& m) {
  m.def(
      "providers",
      [] {
        nb::list out;
        for (const Provider* provider : providers()) {
          const Availability availability = provider->availability();
          nb::list devices;
          if (availability.available) {
            for (const DeviceAttr& device : provider->devices()) devices.append(describe(device));
          }
          out.append(nb::make_tuple(provider->name(), availability.available,
                                    availability.reason, devices));
        }
        return out;
      },
      "Every verbs provider: (name, available, reason, devices).");

  m.def(
      "select",
      [](const std::string& provider, const std::string& device, int port, int gid_index, int mtu) {
        VerbsConfig config;
        config.provider = provider;
        config.device = device;
        config.port = port;
        config.gid_index = gid_index;
        config.mtu = mtu;
        nb::dict out;
        const Provider* chosen = check(select_provider(config));
        out["provider"] = chosen->name();
#if TENSORVERBS_HAVE_IBVERBS
        if (std::string(chosen->name()) == "ibverbs") {
          const auto selected = check(ibverbs::select_device(chosen->devices(), config));
          out["device"] = selected.device.name;
          out["port"] = selected.port.port_num;
          out["gid_index"] = selected.gid.index;
          out["gid"] = selected.gid.gid;
          out["gid_type"] = selected.gid.type;
          out["mtu"] = selected.mtu;
        }
#endif
        return out;
      },
      "provider"_a, "device"_a = "", "port"_a = 0, "gid_index"_a = -1, "mtu"_a = 0,
      "What a context opened with these settings would use: the provider, and for ibverbs the "
      "device, port, GID and MTU (an error says why none).");

  nb::class_<SendWr>(m, "SendWR", "A send work request (ibv_send_wr, one SGE).")
      .def(nb::init<>())
      .def_rw("wr_id", &SendWr::wr_id)
      .def_prop_rw("opcode", [](const SendWr& w) { return static_cast<int>(w.opcode); },
                   [](SendWr& w, int v) { w.opcode = static_cast<WrOpcode>(v); })
      .def_prop_rw("addr", [](const SendWr& w) { return w.sge.addr; }, [](SendWr& w, std::uint64_t v) { w.sge.addr = v; })
      .def_prop_rw("length", [](const SendWr& w) { return w.sge.length; }, [](SendWr& w, std::uint32_t v) { w.sge.length = v; })
      .def_prop_rw("lkey", [](const SendWr& w) { return w.sge.lkey; }, [](SendWr& w, std::uint32_t v) { w.sge.lkey = v; })
      .def_rw("remote_addr", &SendWr::remote_addr)
      .def_rw("rkey", &SendWr::rkey)
      .def_rw("imm", &SendWr::imm)
      .def_rw("signaled", &SendWr::signaled);

  nb::class_<WorkCompletion>(m, "WorkCompletion", "A work completion (ibv_wc).")
      .def_ro("wr_id", &WorkCompletion::wr_id)
      .def_ro("qp_num", &WorkCompletion::qp_num)
      .def_ro("byte_len", &WorkCompletion::byte_len)
      .def_ro("imm", &WorkCompletion::imm)
      .def_ro("has_imm", &WorkCompletion::has_imm)
      .def_prop_ro("status", [](const WorkCompletion& w) { return static_cast<int>(w.status); })
      .def_prop_ro("status_name", [](const WorkCompletion& w) { return std::string(to_string(w.status)); })
      .def_prop_ro("opcode", [](const WorkCompletion& w) { return static_cast<int>(w.opcode); })
      .def_prop_ro("ok", &WorkCompletion::ok);

  nb::class_<Region>(m, "MemoryRegion", "A registered region (ibv_mr).")
      .def_prop_ro("addr", [](const Region& r) { return r.region->addr(); })
      .def_prop_ro("length", [](const Region& r) { return r.region->length(); })
      .def_prop_ro("lkey", [](const Region& r) { return r.region->lkey(); })
      .def_prop_ro("rkey", [](const Region& r) { return r.region->rkey(); })
      .def_prop_ro("buffer", [](const Region& r) {
        return ByteView{r.region->data(), r.region->length(), false,
                        std::shared_ptr<const void>(r.region, r.region->data())};
      }, "The region's bytes (buffer protocol).");

  nb::class_<MemoryWindow>(m, "MemoryWindow", "Remote access to a range, until revoked.")
      .def_prop_ro("addr", &MemoryWindow::addr)
      .def_prop_ro("length", &MemoryWindow::length)
      .def_prop_ro("rkey", &MemoryWindow::rkey)
      .def("revoke", &MemoryWindow::revoke)
      .def("quiesced", &MemoryWindow::quiesced);

  nb::class_<ProtectionDomain>(m, "ProtectionDomain", "A protection domain (ibv_pd).")
      .def("allocate_memory",
           [](ProtectionDomain& pd, std::size_t length, std::uint32_t access) {
             return Region{std::shared_ptr<MemoryRegion>(check(pd.allocate_memory(length, access))), nullptr};
           }, "length"_a, "access"_a)
      .def("register_memory",
           [](ProtectionDomain& pd, nb::handle buffer, std::uint32_t access) {
             Py_buffer view;
             if (PyObject_GetBuffer(buffer.ptr(), &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
               throw nb::python_error();
             }
             void* data = view.buf;
             const auto length = static_cast<std::size_t>(view.len);
             PyBuffer_Release(&view);
             return Region{std::shared_ptr<MemoryRegion>(check(pd.register_memory(data, length, access))),
                           keep(buffer.ptr())};
           }, "buffer"_a, "access"_a)
      .def("bind_window",
           [](ProtectionDomain& pd, const Region& region, std::uint64_t addr, std::size_t length,
              std::uint32_t access) { return check(pd.bind_window(*region.region, addr, length, access)); },
           "region"_a, "addr"_a, "length"_a, "access"_a);

  nb::class_<CompletionQueue>(m, "CompletionQueue", "A completion queue (ibv_cq).")
      .def("poll", [](CompletionQueue& cq, int max) {
        std::vector<WorkCompletion> out(static_cast<std::size_t>(max));
        int n;
        {
          GilReleased release;
          n = cq.poll(out.data(), max);
        }
        out.resize(static_cast<std::size_t>(n));
        return out;
      }, "max"_a = 64)
      .def("wait", [](CompletionQueue& cq, int max, int timeout_ms) {
        std::vector<WorkCompletion> out(static_cast<std::size_t>(max));
        int n;
        {
          GilReleased release;
          n = cq.wait(out.data(), max, timeout_ms);
        }
        out.resize(static_cast<std::size_t>(n));
        return out;
      }, "max"_a = 64, "timeout_ms"_a = -1, "Up to `max` completions, waiting (GIL released).")
      .def("wake", &CompletionQueue::wake);

  nb::class_<QueuePair>(m, "QueuePair", "A reliable-connected queue pair (ibv_qp).")
      .def_prop_ro("qp_num", &QueuePair::qp_num)
      .def_prop_ro("state", [](const QueuePair& qp) { return static_cast<int>(qp.state()); })
      .def_prop_ro("endpoint", [](const QueuePair& qp) {
        const std::string bytes = qp.endpoint();
        return nb::bytes(bytes.data(), bytes.size());
      })
      .def_prop_ro("mtu", &QueuePair::mtu)
      .def("connect", [](QueuePair& qp, const nb::bytes& remote) {
        const std::string bytes(static_cast<const char*>(remote.data()), remote.size());
        Status status;
        {
          GilReleased release;
          status = qp.connect(bytes);
        }
        if (!status.ok()) raise(status);
      }, "remote"_a)
      .def("post_send", [](QueuePair& qp, const std::vector<SendWr>& wrs) {
        Status status;
        {
          GilReleased release;
          status = qp.post_send(wrs.data(), wrs.size());
        }
        if (!status.ok()) raise(status);
      }, "wrs"_a)
      .def("post_rows",
           [](QueuePair& qp, int opcode, std::uint64_t local_base, std::uint32_t lkey, std::uint64_t local_rows,
              std::uint64_t remote_base, std::uint32_t rkey, std::uint64_t remote_rows, std::uint64_t row_bytes,
              const RowIndex& src, const RowIndex& dst, std::size_t first, std::size_t max_requests) {
             if (opcode != static_cast<int>(WrOpcode::kRdmaRead) && opcode != static_cast<int>(WrOpcode::kRdmaWrite)) {
               throw nb::value_error("a row access reads or writes");
             }
             const RowAccess access{static_cast<WrOpcode>(opcode), local_base, lkey, local_rows,
                                    remote_base, rkey, remote_rows, row_bytes};
             return post_rows(qp, access, src, dst, first, max_requests);
           }, "opcode"_a, "local_base"_a, "lkey"_a, "local_rows"_a, "remote_base"_a, "rkey"_a, "remote_rows"_a,
           "row_bytes"_a, "src"_a, "dst"_a, "first"_a, "max_requests"_a,
           "Posts entries from `first` of a row access (row src[i] of the remote rows to or from "
           "row dst[i] of the local ones), runs of rows as one request, at most `max_requests`, the "
           "last signaled; the entry after the last posted.")
      .def("post_recv", [](QueuePair& qp, const std::vector<std::uint64_t>& wr_ids) {
        std::vector<RecvWr> wrs;
        for (std::uint64_t id : wr_ids) wrs.push_back(RecvWr{id});
        const Status status = qp.post_recv(wrs.data(), wrs.size());
        if (!status.ok()) raise(status);
      }, "wr_ids"_a)
      .def("to_error", [](QueuePair& qp, const std::string& why) { qp.to_error(why); }, "why"_a)
      .def_prop_ro("error_detail", &QueuePair::error_detail);

  nb::class_<Context>(m, "Context", "An open device (ibv_context).")
      .def_prop_ro("device", [](const Context& c) { return describe(c.device()); })
      .def("alloc_pd", [](Context& c) { return check(c.alloc_pd()); })
      .def("create_cq", [](Context& c, int depth) { return check(c.create_cq(depth)); }, "depth"_a)
      .def("create_qp",
           [](Context& c, const std::shared_ptr<ProtectionDomain>& pd,
              const std::shared_ptr<CompletionQueue>& send_cq,
              const std::shared_ptr<CompletionQueue>& recv_cq, int max_send_wr, int max_recv_wr) {
             return check(c.create_qp(pd, send_cq, recv_cq, QpCaps{max_send_wr, max_recv_wr}));
           }, "pd"_a, "send_cq"_a, "recv_cq"_a, "max_send_wr"_a = 1024, "max_recv_wr"_a = 1024);

  m.def(
      "open_context",
      [](const std::string& provider, const std::string& listen_host, const std::string& same_host,
         const std::optional<nb::dict>& settings) {
        const VerbsConfig config = settings ? to_config(*settings) : config_of(provider, same_host);
        const Provider* chosen = check(select_provider(config));
        Result<std::shared_ptr<Context>> opened = Status(Code::kUnknown, "");
        {
          GilReleased release;
          opened = chosen->open(config, listen_host);
        }
        return check(std::move(opened));
      },
      "provider"_a = "auto", "listen_host"_a = "127.0.0.1", "same_host"_a = "auto",
      "config"_a = nb::none(),
      "Open a device of `provider` (auto, soft, ibverbs); with `config` (RdmaConfig.to_core()), "
      "of the provider and device it selects, `provider` and `same_host` being ignored.");
}

}  // namespace tensorverbs::binding
