#include "binding/gil_released.h"

#include <nanobind/nanobind.h>

#include <chrono>
#include <thread>

namespace tensorverbs::binding {

namespace {

unsigned long main_thread_ident = 0;

}  // namespace

void note_main_thread() {
  main_thread_ident = nanobind::cast<unsigned long>(
      nanobind::module_::import_("threading").attr("main_thread")().attr("ident"));
}

bool on_main_thread() { return PyThread_get_thread_ident() == main_thread_ident; }

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

GilReleased::~GilReleased() {
  while (interpreter_finalizing() && !on_main_thread()) std::this_thread::sleep_for(std::chrono::hours(1));
  PyEval_RestoreThread(state_);
}

}  // namespace tensorverbs::binding
