// Dense causal attention (bottom-right aligned), the baseline of `verify` and `bench`: the Stage-2 kernel in
// dense mode, where every causally visible key is attended and no mask is read.
#include "attend_launch.cuh"

namespace dashattn::cuda {

void launch_dense(const DenseParams& p, const ProblemShape& s, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream) {
  AttendPlan plan = plan_attend(s, current_sm_count(), true);
  if (plan.num_splits > 1 && (workspace == nullptr || workspace_bytes < plan.workspace_bytes)) plan.num_splits = 1;
  launch_attend_planned(make_dense_args(p, s), s.d, p.q.dtype, plan, workspace, stream);
}

void launch_dense(const DenseParams& p, const ProblemShape& s, cudaStream_t stream) {
  launch_dense(p, s, nullptr, 0, stream);
}

}  // namespace dashattn::cuda
