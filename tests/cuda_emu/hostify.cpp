// Build tool of the emulated kernel tests: rewrites a .cu file as host C++ that device_runtime.h can run on CPU
// fibers (kernel launches, shared-memory declarations, architecture guards and cub's include are the only CUDA-only
// syntax mpx uses).
#include <cctype>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

namespace {

std::string read(const char* path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(std::string("cannot read ") + path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
}

// `extern __shared__ [__align__(N)] TYPE NAME[];` ->
// `TYPE* NAME = reinterpret_cast<TYPE*>(::cuda_emu::dynamic_smem());`
void dynamic_shared(std::string& s) {
  const std::string key = "extern __shared__";
  for (size_t p = s.find(key); p != std::string::npos; p = s.find(key, p)) {
    const size_t end = s.find(';', p);
    std::string decl = s.substr(p + key.size(), end - p - key.size());
    const size_t al = decl.find("__align__(");
    if (al != std::string::npos) decl.erase(al, decl.find(')', al) + 1 - al);
    const size_t br = decl.rfind('[');
    decl = decl.substr(0, br);
    auto in_name = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    size_t name_begin = decl.size();
    while (name_begin > 0 && in_name(decl[name_begin - 1])) --name_begin;
    const std::string type = decl.substr(0, name_begin), name = decl.substr(name_begin);
    const std::string repl = type + "* " + name + " = reinterpret_cast<" + type + "*>(::cuda_emu::dynamic_smem())";
    s.replace(p, end - p, repl);
    p += repl.size();
  }
}

// `KERNEL<<<CFG>>>(` -> `(::cuda_emu::Launch(CFG) + [&](auto&&... emu_args) { KERNEL(emu_args...); })(`
void launches(std::string& s) {
  for (size_t p = s.find("<<<"); p != std::string::npos; p = s.find("<<<", p)) {
    // The kernel's name, with its template arguments: back over balanced <...> and identifier characters.
    size_t b = p;
    int depth = 0;
    while (b > 0) {
      const char c = s[b - 1];
      if (c == '>') ++depth;
      else if (c == '<') --depth;
      else if (depth == 0 && !(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':')) break;
      --b;
    }
    const size_t cfg_end = s.find(">>>", p);
    const std::string kernel = s.substr(b, p - b), cfg = s.substr(p + 3, cfg_end - p - 3);
    const size_t paren = s.find('(', cfg_end);
    const std::string repl =
        "(::cuda_emu::Launch(" + cfg + ") + [&](auto&&... emu_args) { " + kernel + "(emu_args...); })(";
    s.replace(b, paren + 1 - b, repl);
    p = b + repl.size();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: hostify IN.cu OUT.cpp\n";
    return 2;
  }
  try {
    std::string s = read(argv[1]);
    replace_all(s, "#include <cub/device/device_radix_sort.cuh>", "#include \"cub_host.h\"");
    dynamic_shared(s);
    replace_all(s, "__shared__", "static");  // one copy per block: blocks run one after another
    // Code guarded for a device architecture runs: the host plays a compute-capability 9.0 device.
    replace_all(s, "defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800", "1");
    launches(s);
    std::ofstream out(argv[2]);
    out << "// Generated from " << argv[1] << " by tests/cuda_emu/hostify.cpp: do not edit.\n"
        << "#include \"device_runtime.h\"\n#line 1 \"" << argv[1] << "\"\n"
        << s;
    return out ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "hostify: " << e.what() << "\n";
    return 1;
  }
}
