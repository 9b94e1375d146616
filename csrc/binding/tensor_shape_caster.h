// Python's shapes (a sequence of ints: a tuple or list as it is) as TensorShape and back (a
// tuple), without the std::vector a list caster would allocate for each tensor.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <vector>

#include "protocol/tensor_shape.h"

namespace nanobind::detail {

template <>
struct type_caster<tensorverbs::TensorShape> {
  NB_TYPE_CASTER(tensorverbs::TensorShape, const_name("collections.abc.Sequence[int]"))

  bool from_python(handle src, std::uint8_t, cleanup_list*) noexcept {
    if (PyUnicode_Check(src.ptr()) || PyBytes_Check(src.ptr())) return false;
    PyObject* seq = PySequence_Fast(src.ptr(), "");  // (a tuple or list as it is)
    if (seq == nullptr) {
      PyErr_Clear();
      return false;
    }
    bool ok = true;
    try {
      ok = read_dims(seq);
    } catch (...) {  // no memory for the dims of a large rank
      ok = false;
    }
    Py_DECREF(seq);
    return ok;
  }

  bool read_dims(PyObject* seq) {
    const Py_ssize_t rank = PySequence_Fast_GET_SIZE(seq);
    std::int64_t small[tensorverbs::TensorShape::kInlineRank];
    std::vector<std::int64_t> large;
    std::int64_t* dims = small;
    if (static_cast<std::size_t>(rank) > tensorverbs::TensorShape::kInlineRank) {
      large.resize(static_cast<std::size_t>(rank));
      dims = large.data();
    }
    for (Py_ssize_t i = 0; i < rank; ++i) {
      // an int as it is; else its __index__ (which may change the sequence: the item is
      // held, and the sequence read again)
      if (i >= PySequence_Fast_GET_SIZE(seq)) return false;
      PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
      Py_INCREF(item);
      PyObject* index = item;
      if (!PyLong_CheckExact(item)) {
        index = PyNumber_Index(item);
        Py_DECREF(item);
      }
      const long long dim = index == nullptr ? -1 : PyLong_AsLongLong(index);
      Py_XDECREF(index);
      if (dim == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
      dims[i] = dim;
    }
    value = tensorverbs::TensorShape(dims, static_cast<std::size_t>(rank));
    return true;
  }

  static handle from_cpp(const tensorverbs::TensorShape& shape, rv_policy,
                         cleanup_list*) noexcept {
    PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(shape.size()));
    if (tuple == nullptr) return handle();
    for (std::size_t i = 0; i < shape.size(); ++i) {
      PyObject* dim = PyLong_FromLongLong(shape[i]);
      if (dim == nullptr) {
        Py_DECREF(tuple);
        return handle();
      }
      PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), dim);
    }
    return tuple;
  }
};

}  // namespace nanobind::detail
