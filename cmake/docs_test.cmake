# The docs test (label docs): every shell command line of README.md and docs/*.md runs against this build (tests/doc_commands.sh).
if(NOT MPX_BUILD_TESTS OR NOT MPX_BUILD_TOOLS OR NOT TARGET mpx_cli)
  return()
endif()
# The script is told what the build has, so that lines it cannot run here (mpirun without MPI, the
# fuzz scripts without fuzz targets) are reported as such rather than failing or passing unseen.
set(_mpx_docs_mpi OFF)
if(MPX_WITH_MPI AND MPIEXEC_EXECUTABLE)
  set(_mpx_docs_mpi ON)
endif()
set(_mpx_docs_fuzz OFF)
if(TARGET mpx_fuzz_targets)
  set(_mpx_docs_fuzz ON)
endif()
add_test(NAME docs_commands
         COMMAND bash ${PROJECT_SOURCE_DIR}/tests/doc_commands.sh ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}
                 ${_mpx_docs_mpi} ${_mpx_docs_fuzz})
# One thread per process; only the mpirun lines (a fifth of its time) run two, so it shares the
# machine with another test as the single-process tests do.
# Instrumented (tools/sanitize.sh) the commands run several times slower, and each gets 1800 s there.
set(_mpx_docs_timeout 900)
if(CMAKE_CXX_FLAGS MATCHES "-fsanitize")
  set(_mpx_docs_timeout 5400)
endif()
set_tests_properties(docs_commands PROPERTIES LABELS docs TIMEOUT ${_mpx_docs_timeout})
