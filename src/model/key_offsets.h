// The model's key offsets (kv/kv_key_offsets.h): per layer, kv head and
// channel, the constant that best fits the post-RoPE keys of the trained
// context, and the range of the pre-RoPE keys, from a fixed calibration run.
#pragma once

#include <vector>

#include "model/model.h"

namespace rotor {

// Tokens of the calibration run, and the first of them left out of the mean
// (the first tokens' keys are the model's attention sinks, unlike the rest).
inline constexpr int kKeyOffsetTokens = 64;
inline constexpr int kKeyOffsetSkip = 4;
// Positions the offsets are fitted over: the trained context, at most this.
inline constexpr int kKeyOffsetSpan = 32768;

// Runs the model over kKeyOffsetTokens tokens of a fixed English paragraph
// (BOS first; key_offsets.cc) through a deferred (pre-RoPE) f32 cache on a
// pool of n_threads, takes the mean pre-RoPE key c of tokens kKeyOffsetSkip..
// and returns c rotated by every position of the trained context (at most
// kKeyOffsetSpan) and averaged, per layer: [n_layer, n_head_kv, head_dim];
// followed by the middles c and half-widths s of each pre-RoPE channel's
// range over the same tokens (ChannelRanges, key_offsets.cc), in the same
// shape each: [3, n_layer, n_head_kv, head_dim] (kv/kv_key_offsets.h).
// The same model gives the same
// values whatever n_threads (the forward pass does not split a reduction by
// thread count at this length): every process agrees on them.
std::vector<float> ComputeKeyOffsets(const Model& model, int n_threads);

}  // namespace rotor
