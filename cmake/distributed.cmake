# Data-parallel training: MPI (CPU tensors, bootstrap) and NCCL (CUDA tensors), and the multi-rank tests.
# Included once from the top-level CMakeLists.txt after the mpx target and the tests are defined.
set(MPX_DISTRIBUTED AUTO CACHE STRING "Build the MPI/NCCL process group: AUTO (when MPI is found), ON or OFF")
set_property(CACHE MPX_DISTRIBUTED PROPERTY STRINGS AUTO ON OFF)

set(MPX_WITH_MPI OFF)
set(MPX_WITH_NCCL OFF)
set(MPX_DISTRIBUTED_WHY "")
if(MPX_DISTRIBUTED STREQUAL "OFF")
  set(MPX_DISTRIBUTED_WHY "-DMPX_DISTRIBUTED=OFF")
else()
  # The C API, called from C++ (the deprecated C++ bindings are not wanted).
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(MPX_WITH_MPI ON)
  elseif(MPX_DISTRIBUTED STREQUAL "ON")
    message(FATAL_ERROR "MPX_DISTRIBUTED=ON but no MPI was found; install Open MPI (openmpi-bin, libopenmpi-dev) "
                        "or use -DMPX_DISTRIBUTED=OFF")
  else()
    set(MPX_DISTRIBUTED_WHY "no MPI found (install openmpi-bin and libopenmpi-dev)")
  endif()
  # NCCL ships with the CUDA Toolkit on some installs, or as libnccl-dev.
  if(MPX_WITH_CUDA)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
              PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
                 ${CUDAToolkit_LIBRARY_ROOT} PATH_SUFFIXES lib lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      set(MPX_WITH_NCCL ON)
    endif()
  endif()
endif()
message(STATUS "mpx: distributed (MPI) ${MPX_WITH_MPI} ${MPX_DISTRIBUTED_WHY}; NCCL ${MPX_WITH_NCCL} ${NCCL_LIBRARY}")

if(MPX_WITH_MPI)
  # Private: no public header includes mpi.h, so consumers need no MPI to compile against mpx.
  target_compile_definitions(mpx PRIVATE MPX_WITH_MPI=1)
  target_link_libraries(mpx PRIVATE MPI::MPI_CXX)
endif()
if(MPX_WITH_NCCL)
  target_compile_definitions(mpx PRIVATE MPX_WITH_NCCL=1)
  target_include_directories(mpx SYSTEM PRIVATE ${NCCL_INCLUDE_DIR})
  target_link_libraries(mpx PRIVATE ${NCCL_LIBRARY})
endif()
if(NOT MPX_WITH_MPI)
  target_compile_definitions(mpx PRIVATE "MPX_DISTRIBUTED_WHY=\"${MPX_DISTRIBUTED_WHY}\"")
endif()

if(MPX_BUILD_TESTS)
  add_subdirectory(${CMAKE_CURRENT_LIST_DIR}/../tests/distributed ${CMAKE_BINARY_DIR}/tests/distributed)
endif()
