# nvJPEG for decoding JPEGs on the GPU (`mpx train --gpu-decode`; -DMPX_NVJPEG=AUTO|ON|OFF); needs the CUDA backend.
# Taken from the CUDA toolkit (CUDA::nvjpeg) or, where the toolkit lacks it, from MPX_NVJPEG_ROOT,
# $NVJPEG_ROOT or /opt/nvjpeg: NVIDIA's pip wheel unpacked there by tools/install-deps.sh.
set(MPX_NVJPEG AUTO CACHE STRING "Link nvJPEG for GPU JPEG decoding: AUTO (when found), ON or OFF")
set_property(CACHE MPX_NVJPEG PROPERTY STRINGS AUTO ON OFF)
set(MPX_NVJPEG_ROOT "" CACHE PATH "Folder with nvJPEG's nvjpeg.h and libnvjpeg.so* (include/ and lib/, or a nvidia-nvjpeg wheel's files); searched before $NVJPEG_ROOT and /opt/nvjpeg")
set(MPX_WITH_NVJPEG OFF)
set(_mpx_nvjpeg_why "")
set(_mpx_nvjpeg_lib "")
if(MPX_NVJPEG STREQUAL "OFF")
  set(_mpx_nvjpeg_why "MPX_NVJPEG=OFF")
elseif(NOT MPX_WITH_CUDA)
  set(_mpx_nvjpeg_why "the CUDA backend is off")
else()
  if(TARGET CUDA::nvjpeg)
    find_path(MPX_NVJPEG_INCLUDE_DIR nvjpeg.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  if(TARGET CUDA::nvjpeg AND MPX_NVJPEG_INCLUDE_DIR)
    set(MPX_WITH_NVJPEG ON)
    set(_mpx_nvjpeg_lib CUDA::nvjpeg)
  else()
    # A wheel has only the versioned libnvjpeg.so.<CUDA major> (no unversioned link), and the
    # library must be the toolkit's major version: it talks to the same CUDA runtime.
    set(_mpx_major ${CUDAToolkit_VERSION_MAJOR})
    set(_mpx_roots ${MPX_NVJPEG_ROOT} $ENV{NVJPEG_ROOT} /opt/nvjpeg)
    if(NOT "${_mpx_roots}" STREQUAL "${_MPX_NVJPEG_ROOTS_SEARCHED}")  # another root: search again
      unset(MPX_NVJPEG_ROOT_INCLUDE_DIR CACHE)
      unset(MPX_NVJPEG_ROOT_LIBRARY CACHE)
      set(_MPX_NVJPEG_ROOTS_SEARCHED "${_mpx_roots}" CACHE INTERNAL "")
    endif()
    # include/ and lib/ (install-deps' layout), or an unpacked wheel's nvidia/cu13/ or nvidia/nvjpeg/
    # (CUDA 12), from the wheel's root or from an installed wheel's nvidia/ package folder.
    set(_mpx_inc_sfx include nvidia/cu${_mpx_major}/include nvidia/nvjpeg/include cu${_mpx_major}/include nvjpeg/include)
    set(_mpx_lib_sfx lib lib64 nvidia/cu${_mpx_major}/lib nvidia/nvjpeg/lib cu${_mpx_major}/lib nvjpeg/lib)
    find_path(MPX_NVJPEG_ROOT_INCLUDE_DIR nvjpeg.h HINTS ${_mpx_roots} PATH_SUFFIXES ${_mpx_inc_sfx} NO_DEFAULT_PATH)
    find_library(MPX_NVJPEG_ROOT_LIBRARY NAMES libnvjpeg.so.${_mpx_major} nvjpeg
                 HINTS ${_mpx_roots} PATH_SUFFIXES ${_mpx_lib_sfx} NO_DEFAULT_PATH)
    set(_mpx_hmajor "")
    if(MPX_NVJPEG_ROOT_INCLUDE_DIR)
      file(STRINGS ${MPX_NVJPEG_ROOT_INCLUDE_DIR}/nvjpeg.h _v REGEX "#define NVJPEG_VER_MAJOR [0-9]+")
      string(REGEX MATCH "[0-9]+" _mpx_hmajor "${_v}")
    endif()
    if(NOT MPX_NVJPEG_ROOT_INCLUDE_DIR OR NOT MPX_NVJPEG_ROOT_LIBRARY)
      string(CONCAT _mpx_nvjpeg_why "neither the CUDA toolkit nor MPX_NVJPEG_ROOT, NVJPEG_ROOT (environment) nor "
                    "/opt/nvjpeg has nvjpeg.h and libnvjpeg.so (tools/install-deps.sh fetches NVIDIA's wheel into /opt/nvjpeg)")
    elseif(NOT _mpx_hmajor STREQUAL _mpx_major)
      string(CONCAT _mpx_nvjpeg_why "${MPX_NVJPEG_ROOT_INCLUDE_DIR}/nvjpeg.h is nvJPEG '${_mpx_hmajor}', the CUDA "
                    "toolkit is ${_mpx_major}; point MPX_NVJPEG_ROOT at nvJPEG for CUDA ${_mpx_major}")
    else()
      set(MPX_WITH_NVJPEG ON)
      set(MPX_NVJPEG_INCLUDE_DIR ${MPX_NVJPEG_ROOT_INCLUDE_DIR})
      add_library(mpx_nvjpeg SHARED IMPORTED)
      set_target_properties(mpx_nvjpeg PROPERTIES IMPORTED_LOCATION ${MPX_NVJPEG_ROOT_LIBRARY}
                                                  INTERFACE_INCLUDE_DIRECTORIES ${MPX_NVJPEG_ROOT_INCLUDE_DIR})
      set(_mpx_nvjpeg_lib mpx_nvjpeg)
      # Outside the loader's default paths: the build and the installed library both carry the
      # folder in their RUNPATH, so programs start without LD_LIBRARY_PATH.
      get_filename_component(_mpx_nvjpeg_dir ${MPX_NVJPEG_ROOT_LIBRARY} DIRECTORY)
      set_property(TARGET mpx_cuda APPEND PROPERTY BUILD_RPATH ${_mpx_nvjpeg_dir})
      set_property(TARGET mpx_cuda APPEND PROPERTY INSTALL_RPATH ${_mpx_nvjpeg_dir})
    endif()
  endif()
endif()
if(MPX_NVJPEG STREQUAL "ON" AND NOT MPX_WITH_NVJPEG)
  message(FATAL_ERROR "MPX_NVJPEG=ON but ${_mpx_nvjpeg_why}; run tools/install-deps.sh, set MPX_NVJPEG_ROOT, or use "
                      "-DMPX_NVJPEG=OFF")
endif()
if(MPX_WITH_NVJPEG)
  message(STATUS "mpx: nvJPEG ON ${MPX_NVJPEG_INCLUDE_DIR} (${_mpx_nvjpeg_lib})")
  # In the CUDA module, which installs the decoder GpuJpegDecoder uses as it loads.
  target_sources(mpx_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../data/cuda/nvjpeg.cpp)
  target_include_directories(mpx_cuda SYSTEM PRIVATE ${MPX_NVJPEG_INCLUDE_DIR})
  target_link_libraries(mpx_cuda PRIVATE ${_mpx_nvjpeg_lib})
else()
  message(STATUS "mpx: nvJPEG OFF (${_mpx_nvjpeg_why})")
endif()
