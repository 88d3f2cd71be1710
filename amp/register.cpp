// register_*_function: look an op up by its ops.def name and override its autocast policy.
#include "amp/register.h"

#include "core/error.h"
#include "ops/dispatch.h"

namespace mpx::amp {
namespace {

void register_policy(const char* fn, const std::string& name, CastPolicy p) {
  OpId op;
  if (!find_op(name, &op)) {
    std::string similar;
    for (int i = 0; i < kNumOps; ++i) {
      const std::string n = op_name(static_cast<OpId>(i));
      if (!name.empty() && (n.find(name) != std::string::npos || name.find(n) != std::string::npos))
        similar += (similar.empty() ? "" : ", ") + n;
    }
    MPX_ERROR("amp::", fn, ": no op named \"", name,
              "\". Names are the rows of ops/ops.def (MPX_OP(name, policy)), e.g. \"mm\", \"conv2d\", \"softmax\"; "
              "mpx::op_name(OpId) gives them at run time",
              similar.empty() ? std::string() : "; similar names: " + similar);
  }
  set_op_policy(op, p);
}

}  // namespace

void register_half_function(const std::string& name) { register_policy("register_half_function", name, CastPolicy::lower); }
void register_float_function(const std::string& name) { register_policy("register_float_function", name, CastPolicy::fp32); }
void register_promote_function(const std::string& name) {
  register_policy("register_promote_function", name, CastPolicy::promote);
}
void reset_function_registrations() { reset_op_policies(); }

}  // namespace mpx::amp
