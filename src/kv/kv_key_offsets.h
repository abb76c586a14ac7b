// Per-channel key offsets: a constant vector per layer and kv head that keys
// stored after RoPE have subtracted before they are rounded to the cache's K
// type (--kv-k-offset).
//
// Post-RoPE keys carry large constant components in their slowly rotating
// channels (stories260K: channel means up to 19 against a spread of 4), and
// a block type's one scale per block is set by them, so the other channels
// round coarsely. Storing k - m instead is exact for attention: every score
// of a query moves by the same q.m, which softmax ignores. The one place two
// queries score the same keys in one softmax (sinks seen at a shifted
// distance: the query rotated back for them) adds the difference of the two
// shifts (attention.cc). Readers of stored keys in f32 (re-rotation, CellK)
// add m back.
//
// Keys stored before RoPE (deferred) cannot take a constant offset (each is
// rotated by its own distance in attention, and the offset with it), but
// their channels keep their ranges at every position: there keys are stored
// as x = (k - c) / s per channel, c the middle and s the half-width of the
// channel's range over the calibration run, and attention reads them back as
// c + s x before it rotates them. The head's one block scale then no longer
// follows its widest channel (stories260K's q4_0 K and V: PPL +10.5% over
// f32 cached with offsets, +0.91% deferred with these; docs/EVALUATION.md,
// "Key channels").
//
// m, c and s are properties of the model, not of a sequence: every cache of a model
// stores keys with the same m, so blocks are shared across sequences (prefix
// caching) and KV files move between processes. The model computes it once,
// on first use, from a fixed calibration run (model/key_offsets.cc).
#pragma once

#include <functional>
#include <mutex>
#include <vector>

namespace rotor {

class KvKeyOffsets {
 public:
  // compute: [3, n_layer, n_head_kv, head_dim] floats: the offsets m of
  // post-RoPE keys, then the centers c and half-widths s (all > 0) of
  // pre-RoPE keys; called once, on the first use.
  using Compute = std::function<std::vector<float>()>;
  KvKeyOffsets(Compute compute, int n_layer, int row_floats);

  // Layer `layer`'s offsets of post-RoPE keys: [n_head_kv, head_dim].
  const float* Layer(int layer) const { return Part(0, layer); }
  // Layer `layer`'s channel centers and half-widths of pre-RoPE keys:
  // [n_head_kv, head_dim] each.
  const float* Center(int layer) const { return Part(1, layer); }
  const float* Scale(int layer) const { return Part(2, layer); }

 private:
  const float* Part(int part, int layer) const;

  Compute compute_;
  int n_layer_ = 0;
  int row_floats_ = 0;  // n_head_kv * head_dim
  mutable std::once_flag once_;
  mutable std::vector<float> values_;
};

}  // namespace rotor
