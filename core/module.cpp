// Loading libmpx's optional engine modules (core/module.h).
#include "core/module.h"

#include <dlfcn.h>

namespace mpx::detail {
namespace {
std::string folder_of_libmpx() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&folder_of_libmpx), &info) || !info.dli_fname) return "";
  const std::string self = info.dli_fname;
  const size_t slash = self.rfind('/');
  return slash == std::string::npos ? "" : self.substr(0, slash + 1);
}
}  // namespace

void* load_module(const std::string& name, const char* entry, bool global, std::string& error) {
  const std::string file = "lib" + name + ".so";
  const std::string folder = folder_of_libmpx();
  error.clear();
  for (const std::string& path : {folder.empty() ? std::string() : folder + file, file}) {
    if (path.empty()) continue;
    void* h = dlopen(path.c_str(), RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL));
    if (!h) {
      const char* e = dlerror();
      if (error.empty() && e) error = e;
      continue;
    }
    if (void* sym = dlsym(h, entry)) return sym;
    error = path + " has no " + entry + " entry (a module from another mpx version?)";
    return nullptr;
  }
  return nullptr;
}

}  // namespace mpx::detail
