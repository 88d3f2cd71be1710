# Install step of mpx's public headers: each copied under include/mpx/ with its includes of mpx headers qualified.
#
# "core/tensor.h" becomes "mpx/core/tensor.h", so an installed package exports only include/ and a
# consumer's own core/ or data/ headers can never be taken for mpx's (nor mpx's for the
# consumer's). The source tree keeps the short form. Run by install(CODE) with MPX_SRC (source
# root), MPX_STAGE (a scratch folder), MPX_HEADERS_REL (paths relative to MPX_SRC) and
# MPX_INCLUDEDIR (the include folder under the prefix) set.
set(dest_root "${CMAKE_INSTALL_PREFIX}/${MPX_INCLUDEDIR}/mpx")
foreach(rel ${MPX_HEADERS_REL})
  file(READ "${MPX_SRC}/${rel}" text)
  string(REGEX REPLACE "#include \"(core|autograd|ops|nn|optim|amp|distributed|data|models)/" "#include \"mpx/\\1/"
         text "${text}")
  # include/mpx/mpx.h (the umbrella header) and torch.h go to the top of include/mpx/.
  string(REGEX REPLACE "^include/mpx/" "" out_rel "${rel}")
  get_filename_component(dir "${out_rel}" DIRECTORY)
  file(WRITE "${MPX_STAGE}/${out_rel}" "${text}")
  file(INSTALL "${MPX_STAGE}/${out_rel}" DESTINATION "${dest_root}/${dir}")
endforeach()
