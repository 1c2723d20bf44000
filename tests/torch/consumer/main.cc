// find_package(edl COMPONENTS torch) from an installed tree: one step of a wrapped torch SGD.
#include <edl/torch.h>

#include <cstdio>

int main() {
  auto lin = torch::nn::Linear(4, 2);
  torch::optim::SGD sgd(lin->parameters(), torch::optim::SGDOptions(0.1));
  edl::torch::DistributedOptimizerOptions o;
  o.local = true;
  edl::torch::DistributedOptimizer opt(sgd, *lin, o);
  auto before = lin->weight.clone();
  opt.zero_grad();
  lin->forward(torch::ones({3, 4})).sum().backward();
  opt.step();
  if (torch::equal(before, lin->weight)) return 1;
  std::printf("consumer ok: %zu parameters\n", opt.num_parameters());
  return 0;
}
