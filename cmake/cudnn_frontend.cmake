# cuDNN's frontend (header-only C++ over cuDNN's graph API) for fused attention on CUDA: ops/cuda/sdpa_cudnn.cpp.
# -DMPX_CUDNN_FRONTEND=AUTO|ON|OFF; needs cuDNN. Searched in MPX_CUDNN_FRONTEND_ROOT, $CUDNN_FRONTEND_ROOT,
# /opt/cudnn-frontend (where tools/install-deps.sh unpacks NVIDIA's nvidia-cudnn-frontend wheel) and the
# usual prefixes. Without it, CUDA attention runs mpx's own kernels.
set(MPX_CUDNN_FRONTEND AUTO CACHE STRING "Run CUDA attention on cuDNN's fused kernels through cuDNN's frontend: AUTO (when found), ON or OFF")
set_property(CACHE MPX_CUDNN_FRONTEND PROPERTY STRINGS AUTO ON OFF)
set(MPX_CUDNN_FRONTEND_ROOT "" CACHE PATH "Folder with cuDNN frontend's include/cudnn_frontend.h")
set(MPX_WITH_CUDNN_FRONTEND OFF)
set(_mpx_cfe_why "")
if(MPX_CUDNN_FRONTEND STREQUAL "OFF")
  set(_mpx_cfe_why "MPX_CUDNN_FRONTEND=OFF")
elseif(NOT MPX_WITH_CUDNN)
  set(_mpx_cfe_why "cuDNN is off")
elseif(NOT TARGET CUDA::nvrtc)
  set(_mpx_cfe_why "the CUDA toolkit has no NVRTC")
else()
  find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h
            HINTS ${MPX_CUDNN_FRONTEND_ROOT} $ENV{CUDNN_FRONTEND_ROOT} /opt/cudnn-frontend PATH_SUFFIXES include)
  set(_mpx_cfe_version "")
  if(CUDNN_FRONTEND_INCLUDE_DIR AND EXISTS ${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h)
    file(STRINGS ${CUDNN_FRONTEND_INCLUDE_DIR}/cudnn_frontend_version.h _v
         REGEX "#define CUDNN_FRONTEND_(MAJOR|MINOR)_VERSION [0-9]+")
    string(REGEX MATCHALL "[0-9]+" _v "${_v}")
    string(REPLACE ";" "." _mpx_cfe_version "${_v}")
  endif()
  if(NOT CUDNN_FRONTEND_INCLUDE_DIR)
    string(CONCAT _mpx_cfe_why "cudnn_frontend.h not found in MPX_CUDNN_FRONTEND_ROOT, CUDNN_FRONTEND_ROOT (environment) "
                  "or /opt/cudnn-frontend (tools/install-deps.sh fetches NVIDIA's wheel there)")
  elseif(_mpx_cfe_version VERSION_LESS 1.23)
    set(_mpx_cfe_why "${CUDNN_FRONTEND_INCLUDE_DIR} holds cuDNN frontend '${_mpx_cfe_version}'; mpx needs 1.23 or later")
  else()
    set(MPX_WITH_CUDNN_FRONTEND ON)
  endif()
endif()
if(MPX_CUDNN_FRONTEND STREQUAL "ON" AND NOT MPX_WITH_CUDNN_FRONTEND)
  message(FATAL_ERROR "MPX_CUDNN_FRONTEND=ON but ${_mpx_cfe_why}; run tools/install-deps.sh, set MPX_CUDNN_FRONTEND_ROOT, "
                      "or use -DMPX_CUDNN_FRONTEND=OFF")
endif()
if(MPX_WITH_CUDNN_FRONTEND)
  message(STATUS "mpx: cuDNN frontend ${_mpx_cfe_version} ON ${CUDNN_FRONTEND_INCLUDE_DIR}")
  # Header-only and heavy: one source compiles it (ops/cuda/sdpa_cudnn_graph.cpp), an object library the CUDA
  # module and tests/cudnn_plans share. Its JSON serialization is not used, which saves compile time; its
  # run-time-compiled engines call NVRTC.
  add_library(mpx_sdpa_cudnn_graph OBJECT ${PROJECT_SOURCE_DIR}/ops/cuda/sdpa_cudnn_graph.cpp)
  set_target_properties(mpx_sdpa_cudnn_graph PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_definitions(mpx_sdpa_cudnn_graph PUBLIC MPX_WITH_CUDNN_FRONTEND=1 PRIVATE CUDNN_FRONTEND_SKIP_JSON_LIB=1)
  target_include_directories(mpx_sdpa_cudnn_graph SYSTEM PUBLIC ${CUDNN_INCLUDE_DIR} PRIVATE ${CUDNN_FRONTEND_INCLUDE_DIR})
  target_link_libraries(mpx_sdpa_cudnn_graph PUBLIC mpx CUDA::cudart)
  target_compile_options(mpx_sdpa_cudnn_graph PRIVATE -Wall -Wextra -Wno-unused-parameter ${MPX_ARCH_FLAGS})
  target_sources(mpx_cuda PRIVATE $<TARGET_OBJECTS:mpx_sdpa_cudnn_graph>)
  target_link_libraries(mpx_cuda PRIVATE CUDA::nvrtc)
  # The module's own files see only the frontend's version header (cuda::cudnn_version).
  target_compile_definitions(mpx_cuda PRIVATE MPX_WITH_CUDNN_FRONTEND=1)
  target_include_directories(mpx_cuda SYSTEM PRIVATE ${CUDNN_FRONTEND_INCLUDE_DIR})
else()
  message(STATUS "mpx: cuDNN frontend OFF (${_mpx_cfe_why})")
endif()
