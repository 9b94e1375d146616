# The core layer: build facts, the Status type, the bounded spin.
list(APPEND TENSORVERBS_CORE_SOURCES "${CMAKE_CURRENT_LIST_DIR}/build_info.cc")
list(APPEND TENSORVERBS_CORE_SOURCES "${CMAKE_CURRENT_LIST_DIR}/bounded_spin.cc")
