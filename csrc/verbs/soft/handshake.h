// The handshake that opens a stream between two queue pairs: the side with the smaller
// token dials the other's listener and greets it (wire.h's Hello); over a Unix socket both
// sides attach their key table, doorbell and event ring to the greeting. Same host is
// decided here on this side's own evidence: the abstract Unix socket is reachable (it is
// per network namespace) and SO_PEERCRED shows this process's uid.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "verbs/soft/soft_endpoint.h"
#include "verbs/soft/unique_fd.h"
#include "verbs/soft/wire.h"

namespace tensorverbs::verbs::soft {

inline constexpr std::chrono::seconds kHandshakeTimeout{10};

struct Dialed {
  UniqueFd sock;
  bool is_unix = false;
  std::vector<UniqueFd> fds;  // the peer's key table, doorbell, event ring (Unix only)
  std::uint32_t peer_pd = 0;  // the PD number of the peer's queue pair
};

// The descriptors this side attaches to its greeting over a Unix socket.
struct LocalFds {
  int key_table = -1;
  int doorbell = -1;
  int ring = -1;
  std::uint32_t pd = 0;  // the PD number of this side's queue pair
};

// Dials `remote` for the queue pair of token `own`, by `policy` (kNo: TCP only; kYes: the
// Unix socket or an error; kAuto: the Unix socket, else TCP). Blocks up to
// kHandshakeTimeout per attempt; errors name the peer's address.
Result<Dialed> dial(const SoftEndpoint& remote, const Token& own, SameHost policy,
                    const LocalFds& local);

// How long dialing a link may take: a link that does not answer by then is left out.
inline constexpr std::chrono::seconds kLinkDialTimeout{2};

// Dials link `link` (from 1) of the peer's queue pair `target`, at `remote`, from this
// host's address `local_host` (so that the stream takes that link), for the queue pair of
// token `own`, connected to `target` already. Blocks up to kLinkDialTimeout.
Result<Dialed> dial_link(const std::string& local_host, const SoftLinkAddress& remote,
                         const Token& target, const Token& own, std::uint32_t link);

// Sends a greeting with `fds` attached (none when nfds is 0), without blocking for long.
Status send_hello(int sock, const Hello& hello, const int* fds, int nfds);

// Whether the peer of a connected Unix socket runs as this process's user.
bool same_user(int sock);

// Socket options of a data stream; makes it non-blocking.
void tune_stream(int sock, bool is_unix);

// How long a link's bytes may go unacknowledged before its connection is given up (the
// link is cut: the queue pair leaves it out, its stripes going again on the first stream).
inline constexpr std::chrono::milliseconds kLinkUserTimeout{1000};

// A data stream's options (tune_stream), and a link's give-up time.
void tune_link_stream(int sock);

}  // namespace tensorverbs::verbs::soft
