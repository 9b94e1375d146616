// What a device is (DeviceAttr) and the settings a context is opened with (VerbsConfig):
// the RDMA_* variables, parsed and checked by tensorverbs.verbs.config in Python.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tensorverbs::verbs {

struct GidAttr {
  int index = 0;
  std::string gid;   // printable, "fe80::..."
  std::string type;  // "RoCE v2", "RoCE v1", "IB"
};

struct PortAttr {
  int port_num = 1;
  std::string state;       // "ACTIVE", "DOWN", ...
  int active_mtu = 4096;   // bytes
  int max_mtu = 4096;
  std::string link_layer;  // "Ethernet", "InfiniBand"
  std::uint16_t lid = 0;
  std::vector<GidAttr> gids;
};

struct DeviceAttr {
  std::string name;
  std::string provider;
  std::uint64_t max_msg_sz = 0;  // largest single operation, 0 = no limit
  int max_qp_wr = 0;
  std::vector<PortAttr> ports;
};

struct VerbsConfig {
  std::string provider = "auto";  // auto, soft, ibverbs
  std::string device;             // RDMA_DEVICE; empty: the first active one
  int port = 0;                   // RDMA_DEVICE_PORT; 0: the first active one
  int gid_index = -1;             // RDMA_GID_INDEX; -1: RoCEv2 preferred
  int pkey_index = 0;
  int queue_depth = 1024;
  int timeout = 14;
  int retry_cnt = 7;
  int sl = 0;
  int mtu = 0;                    // 0: the active MTU
  int traffic_class = 0;
  std::string same_host = "auto";  // soft provider: auto, yes, no
  // ibverbs: how a peer is given one landing: "type2" memory windows bound to its queue
  // pair, a "registration" of the landing's range, or "auto" (type 2 where the device
  // has them, except soft-RoCE)
  std::string ib_windows = "auto";
  std::string bind_host;           // soft provider: where its TCP listener binds; empty: the
                                   // host peers reach the process at (the one open() gets)
  std::string links;               // soft provider: further local addresses, one per network
                                   // link, comma-separated (TENSORVERBS_LINKS; soft_links.h)
};

}  // namespace tensorverbs::verbs
