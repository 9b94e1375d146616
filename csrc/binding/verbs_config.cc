#include "binding/verbs_config.h"

#include <nanobind/stl/string.h>

#include <string>

namespace nb = nanobind;

namespace tensorverbs::binding {

verbs::VerbsConfig to_config(const nb::dict& d) {
  verbs::VerbsConfig c;
  c.provider = nb::cast<std::string>(d["provider"]);
  c.device = nb::cast<std::string>(d["device"]);
  c.port = nb::cast<int>(d["port"]);
  c.gid_index = nb::cast<int>(d["gid_index"]);
  c.pkey_index = nb::cast<int>(d["pkey_index"]);
  c.queue_depth = nb::cast<int>(d["queue_depth"]);
  c.timeout = nb::cast<int>(d["timeout"]);
  c.retry_cnt = nb::cast<int>(d["retry_cnt"]);
  c.sl = nb::cast<int>(d["sl"]);
  c.mtu = nb::cast<int>(d["mtu"]);
  c.traffic_class = nb::cast<int>(d["traffic_class"]);
  c.same_host = nb::cast<std::string>(d["same_host"]);
  c.ib_windows = nb::cast<std::string>(d["ib_windows"]);
  c.bind_host = nb::cast<std::string>(d["bind_host"]);
  c.links = nb::cast<std::string>(d["links"]);
  return c;
}

}  // namespace tensorverbs::binding
