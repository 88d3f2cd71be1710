// Graph nodes, edges, saved tensors and per-tensor autograd state.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/tensor.h"

namespace mpx::autograd {

struct Node;

/// Where a gradient goes: input `input_nr` of node `fn`.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

/// Shape, dtype and device of one forward output, to materialize zero gradients.
struct OutputMeta {
  IntList sizes;
  DType dtype = kFloat32;
  Device device;
};

/// A backward function. Its inputs are the gradients of the forward outputs, its
/// outputs the gradients of the forward inputs, routed along next_edges.
struct Node : std::enable_shared_from_this<Node> {
  Node();
  virtual ~Node() = default;
  virtual tensor_list apply(tensor_list&& grad_outputs) = 0;
  virtual std::string name() const = 0;
  /// Frees saved tensors once a backward without retain_graph has run through the node.
  virtual void release_variables() {}
  std::vector<Edge> next_edges;
  std::vector<OutputMeta> output_meta;
  /// Creation order; the engine runs later nodes first so deep graphs stay cheap.
  uint64_t sequence_nr;
  /// Non-leaf outputs whose gradient is kept (Tensor::retain_grad).
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>> retained_grads;
  /// Tensor::register_hook on non-leaf outputs: (hook id, output number, hook), run on the
  /// incoming gradient before apply().
  std::vector<std::tuple<uint64_t, uint32_t, std::function<Tensor(const Tensor&)>>> pre_hooks;
};

/// Per-tensor autograd state (attached lazily to TensorImpl).
struct AutogradMeta {
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  std::weak_ptr<Node> grad_accumulator;
  uint32_t output_nr = 0;
  bool requires_grad = false;  // for leaves; non-leaves require grad through grad_fn
  bool retains_grad = false;
  /// Leaves only: Tensor::register_hook (run before accumulation) and
  /// register_post_accumulate_grad_hook (run after), with their ids.
  std::vector<std::pair<uint64_t, std::function<Tensor(const Tensor&)>>> grad_hooks;
  std::vector<std::pair<uint64_t, std::function<void(const Tensor&)>>> post_accumulate_hooks;
};

AutogradMeta& meta(const Tensor& t);  // creates on first use
AutogradMeta* meta_if(const Tensor& t);

/// Throws when `t` is a view taken before an in-place op that autograd recorded on the memory
/// it views (its history would no longer describe its values).
void check_view_current(const Tensor& t);

/// The edge a gradient for `t` must flow along: its grad_fn, or its leaf accumulator.
Edge gradient_edge(const Tensor& t);

/// A tensor saved for backward. Checks the version counter when unpacked, and keeps
/// an op's own output without a reference cycle (re-attached to the node on unpack).
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output);
  /// The saved tensor; `saved_for` names the node in the error when it was modified
  /// in place or already freed.
  Tensor unpack(const std::shared_ptr<Node>& saved_for) const;
  void reset() { data_ = Tensor(); released_ = true; }
  bool defined() const { return data_.defined() || released_; }

 private:
  Tensor data_;
  uint64_t version_ = 0;
  bool is_output_ = false;
  bool released_ = false;
  uint32_t output_nr_ = 0;
  bool requires_grad_ = false;
  std::weak_ptr<Node> grad_fn_;  // only for outputs: the node itself, held weakly
  std::shared_ptr<Node> leaf_fn_;  // for inputs: their own grad_fn (a strong ref is fine)
  bool leaf_requires_grad_ = false;
};

/// A node whose backward is a closure over saved tensors; what every built-in op uses.
struct FunctionNode : Node {
  using BackwardFn = std::function<tensor_list(FunctionNode& self, const tensor_list& grads)>;
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  tensor_list apply(tensor_list&& grads) override;
  std::string name() const override { return name_; }
  void release_variables() override;
  /// Saves a tensor; get it back in the backward with saved(i).
  int save(const Tensor& t, bool is_output = false);
  Tensor saved(int i);
  std::vector<SavedTensor> saved_;
  /// Scalars and shapes the backward needs (set by the forward).
  std::vector<double> scalars;
  std::vector<IntList> shapes;

 private:
  std::string name_;
  BackwardFn fn_;
  bool released_ = false;
};

/// True if grad mode is on and any input requires grad.
bool any_requires_grad(std::initializer_list<Tensor> inputs);
bool any_requires_grad(const tensor_list& inputs);

/// Creates a FunctionNode for `outputs` computed from `inputs` when the graph must be
/// recorded, wiring its edges and the outputs' grad_fn. Returns null otherwise.
std::shared_ptr<FunctionNode> record(const char* name, const tensor_list& inputs,
                                     const tensor_list& outputs, FunctionNode::BackwardFn backward);

/// Accumulates into a leaf's .grad.
struct AccumulateGrad : Node {
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> variable) : variable_(std::move(variable)) {}
  tensor_list apply(tensor_list&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  std::shared_ptr<TensorImpl> variable_;
};

}  // namespace mpx::autograd
