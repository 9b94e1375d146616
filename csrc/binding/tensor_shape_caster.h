// Python's shapes (a tuple or list of ints) as TensorShape and back (a tuple), without the
// std::vector a list caster would allocate for each tensor.
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
    PyObject* seq = src.ptr();
    if (!PyTuple_Check(seq) && !PyList_Check(seq)) return false;
    const Py_ssize_t rank = PySequence_Fast_GET_SIZE(seq);
    PyObject** items = PySequence_Fast_ITEMS(seq);
    std::int64_t small[tensorverbs::TensorShape::kInlineRank];
    std::vector<std::int64_t> large;
    std::int64_t* dims = small;
    if (static_cast<std::size_t>(rank) > tensorverbs::TensorShape::kInlineRank) {
      large.resize(static_cast<std::size_t>(rank));
      dims = large.data();
    }
    for (Py_ssize_t i = 0; i < rank; ++i) {
      PyObject* index = PyNumber_Index(items[i]);  // an int, or what has __index__
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
