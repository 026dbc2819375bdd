// Greedy decode over an hfexport static-cache `decode` program (.pte) with ExecuTorch's C++ runtime.
//
// The documented zero-copy decode loop: the cache tensors are caller-owned buffers, bound both as the method's
// inputs (set_input shares the pointer when the program does not plan graph inputs) and as the outputs that
// carry their new values (Method::set_output_data_ptr when it does not plan graph outputs). Each step then
// writes the cache in place: nothing is copied between steps. Export the program with
//   ExecutorchConfig(dynamic=True, alloc_graph_input=False, alloc_graph_output=False)
// for that; with planned inputs/outputs the loop still runs and copies the cache back (reported on stderr).
//
// Input and output names come from the side file <program>.pte.json that ExecutorchExporter.save writes
// ("inputs" / "outputs" arrays of flat names, in method order).
//
// usage: decode <program.pte> <max_cache_len> <max_new_tokens> <prompt token id>...
// prints the generated token ids on one line (prefill's token first), then "zero_copy=<0|1>" on stderr.
#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace executorch::runtime;
using executorch::aten::ScalarType;
using executorch::extension::FileDataLoader;
using executorch::extension::MallocMemoryAllocator;

namespace {

// The quoted strings of the JSON array under `key` (the side file is flat and written by us).
std::vector<std::string> json_string_array(const std::string& text, const std::string& key) {
  std::vector<std::string> out;
  size_t at = text.find("\"" + key + "\"");
  if (at == std::string::npos) return out;
  at = text.find('[', at);
  size_t end = text.find(']', at);
  while (true) {
    size_t q1 = text.find('"', at);
    if (q1 == std::string::npos || q1 > end) break;
    size_t q2 = text.find('"', q1 + 1);
    out.push_back(text.substr(q1 + 1, q2 - q1 - 1));
    at = q2 + 1;
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

size_t element_size(ScalarType t) {
  switch (t) {
    case ScalarType::Long: return 8;
    case ScalarType::Float: case ScalarType::Int: return 4;
    case ScalarType::Bool: case ScalarType::Byte: case ScalarType::Char: return 1;
    case ScalarType::Half: case ScalarType::BFloat16: return 2;
    default: return 8;
  }
}

// One caller-owned tensor: storage sized for the program's upper bound, current sizes.
struct Buffer {
  std::string name;
  ScalarType dtype;
  std::vector<uint8_t> storage;
  std::vector<executorch::aten::SizesType> sizes;
  executorch::extension::TensorPtr view() {
    return executorch::extension::from_blob(storage.data(), sizes, dtype);
  }
};

#define CHECK_OK(expr, what)                                                    \
  do {                                                                          \
    Error _e = (expr);                                                          \
    if (_e != Error::Ok) {                                                      \
      std::fprintf(stderr, "%s failed: error 0x%x\n", what, (unsigned)_e);      \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s <program.pte> <max_cache_len> <max_new_tokens> <prompt ids>...\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const int64_t cache_len = std::atoll(argv[2]);
  const int new_tokens = std::atoi(argv[3]);
  std::vector<int64_t> prompt;
  for (int i = 4; i < argc; ++i) prompt.push_back(std::atoll(argv[i]));

  std::ifstream side(path + ".json");
  if (!side) { std::fprintf(stderr, "no side file %s.json (save with ExecutorchExporter.save)\n", path.c_str()); return 1; }
  std::stringstream ss;
  ss << side.rdbuf();
  const auto input_names = json_string_array(ss.str(), "inputs");
  const auto output_names = json_string_array(ss.str(), "outputs");

  runtime_init();
  auto loader = FileDataLoader::from(path.c_str());
  if (!loader.ok()) { std::fprintf(stderr, "cannot open %s\n", path.c_str()); return 1; }
  auto program = Program::load(&loader.get());
  if (!program.ok()) { std::fprintf(stderr, "Program::load failed\n"); return 1; }
  auto meta = program->method_meta("forward");
  if (!meta.ok()) { std::fprintf(stderr, "no forward method\n"); return 1; }
  if (meta->num_inputs() != input_names.size() || meta->num_outputs() != output_names.size()) {
    std::fprintf(stderr, "side file names do not match the method (%zu/%zu inputs, %zu/%zu outputs)\n",
                 input_names.size(), meta->num_inputs(), output_names.size(), meta->num_outputs());
    return 1;
  }

  // Memory-planned arenas (intermediates, and planned inputs/outputs if any).
  std::vector<std::unique_ptr<uint8_t[]>> arenas;
  std::vector<Span<uint8_t>> spans;
  for (size_t i = 0; i < meta->num_memory_planned_buffers(); ++i) {
    size_t n = meta->memory_planned_buffer_size(i).get();
    arenas.emplace_back(new uint8_t[n]);
    spans.emplace_back(arenas.back().get(), n);
  }
  HierarchicalAllocator planned({spans.data(), spans.size()});
  MallocMemoryAllocator method_allocator;
  MemoryManager memory(&method_allocator, &planned);
  auto method = program->load_method("forward", &memory);
  if (!method.ok()) { std::fprintf(stderr, "load_method failed: 0x%x\n", (unsigned)method.error()); return 1; }

  // Caller-owned inputs; cache tensors get batch 1 and `cache_len` slots.
  std::vector<Buffer> inputs(input_names.size());
  int ids = -1, mask = -1, pos = -1;
  for (size_t i = 0; i < input_names.size(); ++i) {
    auto info = meta->input_tensor_meta(i);
    Buffer& b = inputs[i];
    b.name = input_names[i];
    b.dtype = info->scalar_type();
    b.storage.assign(info->nbytes(), 0);  // upper bound: fits every accepted shape
    for (auto d : info->sizes()) b.sizes.push_back(d);
    if (!b.sizes.empty()) b.sizes[0] = 1;
    if (b.name == "input_ids") ids = (int)i;
    else if (b.name == "attention_mask") mask = (int)i;
    else if (b.name == "position_ids") pos = (int)i;
    else if (ends_with(b.name, ".keys") || ends_with(b.name, ".values")) b.sizes[2] = cache_len;
  }
  if (ids < 0 || pos < 0) { std::fprintf(stderr, "the program needs input_ids and position_ids inputs\n"); return 1; }

  // Outputs: a cache output shares its input's buffer; logits get their own.
  int logits = -1;
  std::vector<int> output_to_input(output_names.size(), -1);
  for (size_t o = 0; o < output_names.size(); ++o) {
    if (output_names[o] == "logits") logits = (int)o;
    for (size_t i = 0; i < input_names.size(); ++i)
      if (output_names[o] == input_names[i]) output_to_input[o] = (int)i;
  }
  if (logits < 0) { std::fprintf(stderr, "the program has no logits output\n"); return 1; }
  std::vector<uint8_t> logits_storage(meta->output_tensor_meta(logits)->nbytes());

  bool zero_copy = true;
  std::vector<int64_t> tokens;
  int64_t position = 0;
  std::vector<int64_t> feed = prompt;
  auto t_start = std::chrono::steady_clock::now();
  auto t_decode = t_start;
  for (int step = 0; step < new_tokens; ++step) {
    const int64_t q = (int64_t)feed.size();
    std::memcpy(inputs[ids].storage.data(), feed.data(), q * sizeof(int64_t));
    inputs[ids].sizes = {1, (executorch::aten::SizesType)q};
    auto* p = reinterpret_cast<int64_t*>(inputs[pos].storage.data());
    for (int64_t k = 0; k < q; ++k) p[k] = position + k;
    inputs[pos].sizes = {1, (executorch::aten::SizesType)q};
    if (mask >= 0) {
      Buffer& m = inputs[mask];
      const int64_t slots = m.sizes.back() = cache_len;
      m.sizes[m.sizes.size() - 2] = (executorch::aten::SizesType)q;
      const size_t es = element_size(m.dtype);
      std::memset(m.storage.data(), 0, q * slots * es);
      for (int64_t r = 0; r < q; ++r)
        for (int64_t j = 0; j <= position + r && j < slots; ++j) {
          if (m.dtype == ScalarType::Bool) m.storage[r * slots + j] = 1;
          else if (m.dtype == ScalarType::Float) reinterpret_cast<float*>(m.storage.data())[r * slots + j] = 1.f;
          else reinterpret_cast<int64_t*>(m.storage.data())[r * slots + j] = 1;
        }
    }
    std::vector<executorch::extension::TensorPtr> views;
    for (size_t i = 0; i < inputs.size(); ++i) {
      views.push_back(inputs[i].view());
      CHECK_OK(method->set_input(*views.back(), i), ("set_input " + inputs[i].name).c_str());
    }
    for (size_t o = 0; o < output_names.size(); ++o) {
      if (meta->output_tensor_meta(o)->is_memory_planned()) { zero_copy = zero_copy && (int)o == logits; continue; }
      if ((int)o == logits) {
        CHECK_OK(method->set_output_data_ptr(logits_storage.data(), logits_storage.size(), o), "set_output_data_ptr logits");
      } else if (output_to_input[o] >= 0) {
        Buffer& b = inputs[output_to_input[o]];
        CHECK_OK(method->set_output_data_ptr(b.storage.data(), b.storage.size(), o), ("set_output_data_ptr " + b.name).c_str());
      }
    }
    CHECK_OK(method->execute(), "execute");
    for (size_t o = 0; o < output_names.size(); ++o) {  // copy fallback where the runtime owns the output
      if (output_to_input[o] < 0) continue;
      const auto& t = method->get_output(o).toTensor();
      Buffer& b = inputs[output_to_input[o]];
      if (t.const_data_ptr() != b.storage.data()) {
        zero_copy = false;
        std::memcpy(b.storage.data(), t.const_data_ptr(), t.nbytes());
      }
    }
    const auto& out = method->get_output(logits).toTensor();
    const int64_t vocab = out.size(out.dim() - 1);
    const float* row = out.const_data_ptr<float>() + (q - 1) * vocab;
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v) if (row[v] > row[best]) best = v;
    tokens.push_back(best);
    position += q;
    feed.assign(1, best);
    if (step == 0) t_decode = std::chrono::steady_clock::now();
  }
  auto t_end = std::chrono::steady_clock::now();
  for (size_t i = 0; i < tokens.size(); ++i) std::printf(i ? " %lld" : "%lld", (long long)tokens[i]);
  std::printf("\n");
  double decode_s = std::chrono::duration<double>(t_end - t_decode).count();
  std::fprintf(stderr, "zero_copy=%d decode_tokens_per_s=%.1f\n", (int)zero_copy,
               tokens.size() > 1 ? (tokens.size() - 1) / decode_s : 0.0);
  return 0;
}
