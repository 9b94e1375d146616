// SoftContext: an open "soft0" device. It owns what its verbs objects share: the key
// table (with the `waiting` flag peers read), the doorbell, the progress engine, the
// listener, the directory of its queue pairs, the peers' memory mapped so far and the
// copy helpers.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "verbs/context.h"
#include "verbs/soft/copy_pool.h"
#include "verbs/soft/doorbell.h"
#include "verbs/soft/key_table.h"
#include "verbs/soft/listener.h"
#include "verbs/soft/peer_memory.h"
#include "verbs/soft/progress.h"
#include "verbs/soft/soft_endpoint.h"

namespace tensorverbs::verbs::soft {

class SoftQueuePair;

// How long a queue pair that connect()ed waits for the peer to dial in.
inline constexpr std::chrono::seconds kAttachTimeout{30};

class SoftContext final : public Context, private Progress::Hooks {
 public:
  static Result<std::shared_ptr<SoftContext>> open(const VerbsConfig& config,
                                                   const std::string& listen_host);
  ~SoftContext() override;

  const DeviceAttr& device() const override { return device_; }
  Result<std::shared_ptr<ProtectionDomain>> alloc_pd() override;
  Result<std::shared_ptr<CompletionQueue>> create_cq(int depth) override;
  Result<std::shared_ptr<QueuePair>> create_qp(const std::shared_ptr<ProtectionDomain>& pd,
                                              const std::shared_ptr<CompletionQueue>& send_cq,
                                              const std::shared_ptr<CompletionQueue>& recv_cq,
                                              QpCaps caps) override;

  KeyTable& keys() { return *keys_; }
  Progress& progress() { return *progress_; }
  CopyPool& copier() { return copier_; }
  const Doorbell& doorbell() const { return *doorbell_; }
  SameHost same_host() const { return same_host_; }
  const std::string& listen_host() const { return listen_host_; }
  const Listener& listener() const { return *listener_; }
  // The context's further addresses, one per link (TENSORVERBS_LINKS), in order: where a
  // peer dials link n (the n-th, from 1) and where this side dials its peer's link n from.
  const std::vector<SoftLinkAddress>& links() const { return links_; }

  // -- queue pairs --
  std::uint32_t new_qp_num();
  std::uint64_t add_qp(const Token& token, const std::weak_ptr<SoftQueuePair>& qp);
  void remove_qp(const Token& token, std::uint64_t cookie);
  // The cookie of a link's stream of `qp` (its events go to qp.on_link_socket(link)).
  std::uint64_t add_link(const std::weak_ptr<SoftQueuePair>& qp, std::uint32_t link);
  void remove_link(std::uint64_t cookie);
  // Polls `cookie`'s rings from now on (a connected queue pair).
  void activate(std::uint64_t cookie);
  // Fails `qp` if no peer dialed in by `deadline`.
  void expect_dial(std::uint64_t cookie, std::chrono::steady_clock::time_point deadline);
  // Calls the queue pair's redial_link(link) at `when`, on a thread of its own started by
  // that link's listener (never on the data path, nor holding up greetings).
  void redial_at(std::uint64_t cookie, std::uint32_t link, std::chrono::steady_clock::time_point when);

  // The peer context whose key table `table_fd` is (mapped once, shared by its queue
  // pairs); `doorbell_fd` is its doorbell.
  Result<std::shared_ptr<PeerMemory>> peer_memory(UniqueFd table_fd, UniqueFd doorbell_fd);

 private:
  SoftContext() = default;
  Status init(const VerbsConfig& config, const std::string& listen_host);
  // Listens on each of `hosts` (comma-separated), one link each.
  Status open_links(const std::string& hosts);
  void on_dial(const Hello& hello, UniqueFd sock, bool is_unix, std::vector<UniqueFd> fds);
  using Deadlines = std::multimap<std::chrono::steady_clock::time_point, std::uint64_t>;
  // Takes the cookies of `deadlines` that are due; `next` is when the first left is due
  // (time_point::max() when none is left).
  static std::vector<std::uint64_t> take_due(Deadlines& deadlines,
                                             std::chrono::steady_clock::time_point* next);
  void on_tick();
  void on_link_tick(std::uint32_t link);
  std::shared_ptr<SoftQueuePair> find(std::uint64_t cookie);

  // Progress::Hooks (called by the driving thread)
  bool poll_memory() override;
  bool memory_ready() override;
  void on_event(std::uint64_t cookie, std::uint32_t events) override;
  void refresh_active();

  DeviceAttr device_;
  SameHost same_host_ = SameHost::kAuto;
  std::string listen_host_;
  std::unique_ptr<KeyTable> keys_;
  std::unique_ptr<Doorbell> doorbell_;
  std::unique_ptr<Progress> progress_;
  CopyPool copier_{default_copy_helpers()};

  std::mutex mu_;
  std::map<Token, std::uint64_t> by_token_;
  std::unordered_map<std::uint64_t, std::weak_ptr<SoftQueuePair>> qps_;
  std::unordered_map<std::uint64_t, std::pair<std::weak_ptr<SoftQueuePair>, std::uint32_t>> link_streams_;
  std::vector<std::uint64_t> active_;
  std::atomic<std::uint64_t> active_version_{0};
  Deadlines dial_deadlines_;
  std::array<Deadlines, kMaxLinks> redials_;  // per link (from link 1)
  std::uint64_t next_cookie_ = Progress::kFirstCookie;
  std::atomic<std::uint32_t> next_qp_num_{1};
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::weak_ptr<PeerMemory>> peers_;

  // the driver's copy of the active queue pairs (touched only by the driving thread)
  std::vector<std::weak_ptr<SoftQueuePair>> driver_active_;
  std::uint64_t driver_version_ = ~std::uint64_t{0};

  std::vector<SoftLinkAddress> links_;
  std::vector<std::unique_ptr<Listener>> link_listeners_;  // one per link
  std::unique_ptr<Listener> listener_;  // last: its thread stops first
};

}  // namespace tensorverbs::verbs::soft
