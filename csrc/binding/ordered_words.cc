#include "binding/ordered_words.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace nb = nanobind;
using namespace nb::literals;

namespace tensorverbs::binding {

namespace {

// The 8-byte word `index` of `buffer` (C-contiguous, writable if `writable`), checked to lie
// within it and to be aligned; the view is released at once: the caller's buffer keeps the
// memory alive for the call.
std::uint64_t* word_at(nb::handle buffer, std::size_t index, bool writable) {
  Py_buffer view;
  const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(buffer.ptr(), &view, flags) != 0) throw nb::python_error();
  const auto len = static_cast<std::size_t>(view.len);
  auto* base = static_cast<std::uint8_t*>(view.buf);
  PyBuffer_Release(&view);
  if (index >= len / sizeof(std::uint64_t)) {
    throw nb::index_error(("word " + std::to_string(index) + " is past a buffer of " + std::to_string(len) +
                           " bytes").c_str());
  }
  auto* word = base + index * sizeof(std::uint64_t);
  if (reinterpret_cast<std::uintptr_t>(word) % alignof(std::uint64_t) != 0) {
    throw nb::value_error("the buffer's words are not 8-byte aligned");
  }
  return reinterpret_cast<std::uint64_t*>(word);
}

}  // namespace

void bind_ordered_words(nb::module_& m) {
  m.def(
      "store_fenced",
      [](nb::handle buffer, std::size_t index, std::uint64_t value) {
        std::uint64_t* word = word_at(buffer, index, true);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        __atomic_store_n(word, value, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
      },
      "buffer"_a, "index"_a, "value"_a,
      "Store `value` in the 8-byte word `index` of `buffer`, after every store and load before this "
      "call and before every one after it.");
  m.def(
      "load_fenced",
      [](nb::handle buffer, std::size_t index) {
        const std::uint64_t* word = word_at(buffer, index, false);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        const std::uint64_t value = __atomic_load_n(word, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        return value;
      },
      "buffer"_a, "index"_a,
      "The 8-byte word `index` of `buffer`, loaded after every load and store before this call and "
      "before every one after it.");
}

}  // namespace tensorverbs::binding
