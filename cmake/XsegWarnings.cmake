# XsegWarnings.cmake: the compiler warnings of the project, stated once.  The
# library (lib/), every tool (tools/CMakeLists.txt applies them to each
# tool's targets) and every test suite (tests/CMakeLists.txt) build with them;
# a new warning anywhere is fixed, not silenced.
set(XSEG_WARN -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes)

# xseg_warnings(TARGET...): compile the targets' own sources with XSEG_WARN.
function(xseg_warnings)
  foreach(t ${ARGN})
    target_compile_options(${t} PRIVATE ${XSEG_WARN})
  endforeach()
endfunction()
