// GilReleased: the GIL released for a scope (nanobind's gil_scoped_release), except that a
// thread other than the main one coming back while the interpreter finalizes does not take
// the GIL again: it parks until the process exits. Taking it then, CPython ends the thread
// with pthread_exit, whose unwinding would leave the noexcept destructor and end the whole
// process with SIGABRT (a daemon thread waiting in the core as its process exits, e.g. for
// a lost channel). The main thread, which finalizes, takes it as usual.
#pragma once

#include <Python.h>

namespace tensorverbs::binding {

// Notes Python's main thread (with the GIL, as the module loads).
void note_main_thread();
// Whether this thread is Python's main thread (the one that runs signal handlers).
bool on_main_thread();
// Whether the interpreter is finalizing (readable without the GIL).
bool interpreter_finalizing();

class GilReleased {
 public:
  GilReleased() : state_(PyEval_SaveThread()) {}
  ~GilReleased();
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  PyThreadState* state_;
};

}  // namespace tensorverbs::binding
