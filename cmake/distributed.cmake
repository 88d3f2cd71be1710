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
  # A module libmpx loads when mpirun started the process (distributed/mpi_link.cpp): no public
  # header includes mpi.h, and neither a consumer nor a single-process run links or maps MPI.
  target_compile_definitions(mpx PRIVATE MPX_WITH_MPI=1)
  add_library(mpx_mpi MODULE ${CMAKE_CURRENT_LIST_DIR}/../distributed/mpi/mpi_backend.cpp)
  target_link_libraries(mpx_mpi PRIVATE mpx MPI::MPI_CXX)
  target_link_options(mpx_mpi PRIVATE -Wl,--no-undefined)
  target_compile_options(mpx_mpi PRIVATE -Wall -Wextra -Wno-unused-parameter)
  set_target_properties(mpx_mpi PROPERTIES PREFIX lib)
  add_dependencies(mpx_modules mpx_mpi)
endif()
if(MPX_WITH_NCCL)  # in the CUDA module, which installs its transport as it loads
  target_sources(mpx_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../distributed/cuda/nccl_backend.cpp)
  target_include_directories(mpx_cuda SYSTEM PRIVATE ${NCCL_INCLUDE_DIR})
  target_link_libraries(mpx_cuda PRIVATE ${NCCL_LIBRARY})
endif()
if(NOT MPX_WITH_MPI)
  target_compile_definitions(mpx PRIVATE "MPX_DISTRIBUTED_WHY=\"${MPX_DISTRIBUTED_WHY}\"")
endif()

if(MPX_BUILD_TESTS)
  add_subdirectory(${CMAKE_CURRENT_LIST_DIR}/../tests/distributed ${CMAKE_BINARY_DIR}/tests/distributed)
endif()
