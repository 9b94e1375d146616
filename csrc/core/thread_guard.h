// run_guarded: how a thread of the core (a completion thread, a provider's listener or
// progress, a helper) meets what the code it calls throws. Nothing escapes a thread of the
// core, since that would end the process (std::terminate): what is thrown is handed, as
// text, to whoever stands for the work that threw (a channel, a queue pair), which fails
// with it. A failure to report it (no memory left for the message) is dropped.
#pragma once

#include <exception>

namespace tensorverbs {

// Runs fn(); if it throws, calls on_throw(what) with the exception's what() and returns
// false.
template <typename Fn, typename OnThrow>
bool run_guarded(Fn&& fn, OnThrow&& on_throw) noexcept {
  auto report = [&on_throw](const char* what) noexcept {
    try {
      on_throw(what);
    } catch (...) {
    }
  };
  try {
    fn();
    return true;
  } catch (const std::exception& e) {
    report(e.what());
  } catch (...) {
    report("an exception of an unknown type");
  }
  return false;
}

}  // namespace tensorverbs
