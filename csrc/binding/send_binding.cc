#include "binding/send_binding.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "binding/gil_released.h"
#include "protocol/send_completion.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tensorverbs::binding {

namespace {

// (code, message) of a settled completion, None while it is open.
std::optional<std::pair<int, std::string>> outcome(const SendCompletion& completion) {
  const std::optional<Status> status = completion.status();
  if (!status) return std::nullopt;
  return std::make_pair(static_cast<int>(status->code()), status->message());
}

}  // namespace

void bind_send_completion(nb::module_& m) {
  nb::class_<SendCompletion>(m, "SendCompletion", "The outcome of one send, once settled.")
      .def(
          "wait",
          [](const SendCompletion& c, double timeout) {
            GilReleased release;
            return c.wait(timeout);
          },
          "timeout"_a, "Wait until settled (timeout < 0: none); False if the timeout passed.")
      .def("outcome", &outcome, "(code, message) once settled (code 0: delivered), else None.")
      .def_prop_ro("what", &SendCompletion::what);

  nb::class_<SendTicket>(m, "SendTicket",
                         "What a send's value carries: settles its completion, as dropped "
                         "when it is freed unsettled.")
      .def("deliver", &SendTicket::deliver, "The receiver has the tensor.")
      .def(
          "fail", [](SendTicket& t, int code, const std::string& message) {
            t.fail(Status(static_cast<Code>(code), message));
          },
          "code"_a, "message"_a, "The send failed: '<what>: <message>'.")
      .def_prop_ro("completion", &SendTicket::completion);

  nb::class_<SendLedger>(m, "SendLedger", "The completions of one task's sends not settled yet.")
      .def(nb::new_([] { return std::make_shared<SendLedger>(); }))
      .def(
          "open",
          [](SendLedger& l, std::string what, std::int64_t parts) {
            if (parts < 1) throw nb::value_error("a send has one part at least");
            return l.open(std::move(what), parts);
          },
          "what"_a, "parts"_a = 1,
           "A ticket for a new send described by `what`, of `parts` values (delivered once "
           "each of them is).")
      .def(
          "wait_all",
          [](SendLedger& l, double timeout) {
            GilReleased release;
            return l.wait_all(timeout);
          },
          "timeout"_a, "Wait until every send is settled (timeout < 0: none); False if it passed.")
      .def("open_count", &SendLedger::open_count)
      .def("describe_open", &SendLedger::describe_open, "limit"_a,
           "What the oldest `limit` open sends are.")
      .def(
          "fail_all", [](SendLedger& l, int code, const std::string& message) {
            l.fail_all(Status(static_cast<Code>(code), message));
          },
          "code"_a, "message"_a, "Settle every open send with (code, '<what>: <message>').");
}

}  // namespace tensorverbs::binding
