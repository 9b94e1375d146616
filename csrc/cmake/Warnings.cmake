# tensorverbs_warnings: the warnings (as errors) every project target compiles with.
add_library(tensorverbs_warnings INTERFACE)
target_compile_options(tensorverbs_warnings INTERFACE
  -Wall -Wextra -Werror -Wpedantic
  -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast -Wcast-align -Wcast-qual
  -Wnon-virtual-dtor -Woverloaded-virtual -Wnull-dereference -Wdouble-promotion
  -Wformat=2 -Wimplicit-fallthrough -Wundef -Wmissing-declarations
  $<$<CXX_COMPILER_ID:GNU>:-Wduplicated-cond -Wduplicated-branches -Wlogical-op>
  $<$<CXX_COMPILER_ID:Clang>:-Wextra-semi -Wunreachable-code>
)
# Optimised builds fortify glibc's calls, as distributions' compilers do by default: an
# ignored result of read() or write() is then a warning, so an error here too.
target_compile_options(tensorverbs_warnings INTERFACE
  $<$<CONFIG:Release,RelWithDebInfo>:-U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2>)
