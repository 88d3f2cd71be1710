// Internal: loading the optional engines libmpx keeps out of its own link (libmpx_cuda, libmpx_mpi) on first use.
#pragma once
#include <string>

namespace mpx::detail {

/// Loads `lib<name>.so` from the folder libmpx itself was loaded from (build tree and install
/// alike), else through the loader's search path, and returns its `entry` symbol; null with the
/// loader's message in `error` when either fails. `global` exports the module's dependencies to
/// libraries loaded later (Open MPI's plugins need libmpi's symbols).
void* load_module(const std::string& name, const char* entry, bool global, std::string& error);

}  // namespace mpx::detail
