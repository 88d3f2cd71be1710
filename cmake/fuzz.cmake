# Fuzz targets (fuzz/): -DMPX_FUZZ=ON makes this tree the libFuzzer build (clang, ASan + UBSan); a normal
# build with clang's libFuzzer at hand makes that tree as a sub-build and CTest runs each target briefly.
option(MPX_FUZZ "This tree is the libFuzzer build: clang, ASan + UBSan, the targets in fuzz/" OFF)
set(MPX_FUZZ_TESTS AUTO CACHE STRING "Build the fuzz targets beside the main build and run each briefly as a test (label fuzz): AUTO, ON or OFF")
set_property(CACHE MPX_FUZZ_TESTS PROPERTY STRINGS AUTO ON OFF)
set(MPX_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzz test runs")
set(MPX_FUZZ_NAMES safetensors idx cifar10 image checkpoint_meta token_shard)

if(MPX_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "MPX_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  # The parsers live in core/ and data/: those files get coverage and the sanitizers. The compute
  # kernels (ops/, nn/, optim/, ...) are linked but barely run on fuzz inputs, so they build at -O0
  # without instrumentation: the kernels at -O1 with ASan took two thirds of a CI machine's build.
  set(MPX_FUZZ_FLAGS -O1 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined)
  get_target_property(_mpx_fuzz_srcs mpx SOURCES)
  foreach(src ${_mpx_fuzz_srcs})
    if(src MATCHES "/(core|data)/[^/]+\\.cpp$")
      set_source_files_properties(${src} TARGET_DIRECTORY mpx PROPERTIES COMPILE_OPTIONS
                                  "${MPX_FUZZ_FLAGS};-fsanitize=fuzzer-no-link")
    else()
      set_source_files_properties(${src} TARGET_DIRECTORY mpx PROPERTIES COMPILE_OPTIONS "-O0")
    endif()
  endforeach()
  target_link_options(mpx PRIVATE -fsanitize=address,undefined)
  add_subdirectory(fuzz)
  return()
endif()

if(MPX_FUZZ_TESTS STREQUAL "OFF" OR NOT MPX_BUILD_TESTS)
  return()
endif()
find_program(MPX_FUZZ_CLANGXX NAMES clang++ clang++-14)
find_program(MPX_FUZZ_CLANG NAMES clang clang-14)
set(_mpx_fuzz_rt "")
if(MPX_FUZZ_CLANGXX)
  execute_process(COMMAND ${MPX_FUZZ_CLANGXX} -print-file-name=libclang_rt.fuzzer-x86_64.a
                  OUTPUT_VARIABLE _mpx_fuzz_rt OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(NOT MPX_FUZZ_CLANG OR NOT EXISTS "${_mpx_fuzz_rt}")
  if(MPX_FUZZ_TESTS STREQUAL "ON")
    message(FATAL_ERROR "MPX_FUZZ_TESTS=ON but clang with libFuzzer's runtime was not found; install clang and "
                        "libclang-rt-14-dev, or use -DMPX_FUZZ_TESTS=OFF")
  endif()
  message(STATUS "mpx: fuzz tests OFF (no clang with libFuzzer's runtime: install clang and libclang-rt-14-dev)")
  return()
endif()
message(STATUS "mpx: fuzz tests ON (${MPX_FUZZ_SECONDS} s per target, built by ${MPX_FUZZ_CLANGXX})")

include(ExternalProject)
set(_mpx_fuzz_dir ${CMAKE_BINARY_DIR}/fuzz-build)
set(_mpx_fuzz_native ON)
if(DEFINED MPX_NATIVE)
  set(_mpx_fuzz_native ${MPX_NATIVE})
endif()
ExternalProject_Add(mpx_fuzz_targets
  SOURCE_DIR ${PROJECT_SOURCE_DIR}
  BINARY_DIR ${_mpx_fuzz_dir}
  CMAKE_ARGS -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${MPX_FUZZ_CLANGXX} -DCMAKE_C_COMPILER=${MPX_FUZZ_CLANG}
             -DMPX_FUZZ=ON -DMPX_CUDA=OFF -DMPX_DISTRIBUTED=OFF -DMPX_BUILD_TESTS=OFF -DMPX_BUILD_TOOLS=OFF
             -DMPX_BUILD_BENCH=OFF -DMPX_NATIVE=${_mpx_fuzz_native}
  BUILD_COMMAND ${CMAKE_COMMAND} --build ${_mpx_fuzz_dir} -j 2
  INSTALL_COMMAND ""
  BUILD_ALWAYS ON)
foreach(name ${MPX_FUZZ_NAMES})
  add_test(NAME fuzz_${name}
           COMMAND bash ${PROJECT_SOURCE_DIR}/fuzz/run.sh ${_mpx_fuzz_dir}/fuzz/fuzz_${name} ${name} ${MPX_FUZZ_SECONDS})
  set_tests_properties(fuzz_${name} PROPERTIES LABELS fuzz TIMEOUT 300)
endforeach()
