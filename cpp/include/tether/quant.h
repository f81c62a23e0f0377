// tether/quant.h: INT8 post-training quantization.
//
// A Calibrator compiles the float model on the CPU engine and observes every tensor to be
// quantized as its kernel writes it, reducing it into a TensorStats: exact extremes and two
// histograms of magnitudes (one per sign) whose bins depend only on the largest magnitude
// seen. States merge exactly, so the result is the same whatever the batch size, the batch
// order or the number of processes. Ranges come from any method (MinMax, Percentile, Entropy,
// MSE, best-by-SQNR) computed from one state; quantize_qdq() writes a standard QDQ model.
//
//   using namespace tether;
//   ir::Model float_model = quant::prepare(ir::load_model("m.onnx"));
//   quant::QuantizeOptions opts = quant::profile_options("onnxruntime");
//   quant::Plan plan = quant::plan(float_model, opts);
//   quant::Calibrator cal(float_model, plan.observed(), {});
//   for (auto& batch : batches) cal.observe(batch);            // {{"x", tensor}, ...}
//   auto ranges = quant::compute_ranges(plan, cal.stats(), {.method = "entropy"}, opts);
//   ir::Model q = quant::quantize_qdq(float_model, plan, ranges, opts).model;
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tether/error.h"
#include "tether/model.h"
#include "tether/tensor.h"

namespace tether::quant {

// ---- statistics ---------------------------------------------------------------------------

/// Statistics of one float tensor over every sample observed.
///
/// The histograms count magnitudes |x| separately for x >= 0 (`positive`) and x < 0
/// (`negative`) in `bins` equal bins covering [0, 2^exponent), where 2^exponent is the
/// smallest power of two above every magnitude seen. When a larger magnitude arrives the
/// exponent grows and bins merge in aligned groups of 2^k, which gives exactly the counts that
/// binning at the new exponent would have given: the state depends only on the multiset of
/// values observed, never on how they were batched or ordered.
struct TensorStats {
  static constexpr int kNoExponent = std::numeric_limits<int>::min();

  int bins = 2048;        ///< bins per sign, a power of two in [16, 65536]
  int64_t count = 0;      ///< finite values observed
  int64_t zeros = 0;      ///< values equal to zero (either sign)
  int64_t nonfinite = 0;  ///< NaN or infinite values seen (not binned, not in min/max)
  float min = std::numeric_limits<float>::infinity();   ///< of finite values; > max while count == 0
  float max = -std::numeric_limits<float>::infinity();
  int exponent = kNoExponent;  ///< kNoExponent while every finite value seen is zero
  std::vector<uint64_t> positive;  ///< bins counts (empty until the first value)
  std::vector<uint64_t> negative;
  /// Largest |x| per channel along `channel_axis` (empty when channels are not tracked).
  std::vector<float> channel_absmax;
  int channel_axis = -1;  ///< the axis channel_absmax follows, -1 for none

  TensorStats() = default;
  /// Empty statistics with `bins` per sign (ArgumentError unless a power of two in range).
  explicit TensorStats(int bins, int channel_axis = -1);

  /// Adds the values of a row-major float32 tensor of `dims`. Channels are tracked along
  /// channel_axis when it is >= 0 and < the rank (every call must agree on that dim's size,
  /// else ArgumentError).
  void observe(const float* data, const std::vector<int64_t>& dims);
  /// The two halves of observe(): `n` values into counts, extremes and histograms, and the
  /// channel extremes of a tensor of `dims`. Parts of one tensor observed into separate states
  /// (on separate threads) and merged give what one observe() of the whole gives.
  void observe_values(const float* data, int64_t n);
  void observe_channels(const float* data, const std::vector<int64_t>& dims);
  /// Back to no observations, keeping bins, channel axis and the histograms' memory.
  void clear();
  /// Adds another state of the same tensor. Throws ArgumentError, changing nothing, when bins or
  /// channels differ, or when either state is malformed (histograms not both empty or both of
  /// `bins` entries, an exponent no float32 magnitude has); observe() checks its own state so.
  void merge(const TensorStats& other);

  /// Width of one bin: 2^exponent / bins (0 while exponent is kNoExponent).
  double bin_width() const;
  /// Largest finite magnitude seen (0 when none).
  float absmax() const;
  /// True when nothing finite was observed.
  bool empty() const { return count == 0; }
};

// ---- quantization grids and parameters -----------------------------------------------------

/// The integer grid a tensor is quantized to.
struct Grid {
  ir::DType dtype = ir::DType::kInt8;  ///< kInt8 or kUInt8
  bool symmetric = false;              ///< range made symmetric around zero (zero point at the middle)
  bool reduce_range = false;           ///< one bit less (7-bit values), for CPUs whose int8 products saturate

  /// Smallest and largest integers used, following onnxruntime's get_qmin_qmax_for_qType:
  /// int8 [-128, 127], symmetric int8 [-127, 127], uint8 [0, 255] (symmetric or not);
  /// reduce_range (which takes precedence over symmetric) int8 [-64, 64], uint8 [0, 127].
  /// Throws ArgumentError when dtype is neither kInt8 nor kUInt8.
  int64_t qmin() const;
  int64_t qmax() const;
};

/// Scale and zero point of one tensor: one entry per tensor, or one per channel along `axis`.
struct QParams {
  std::vector<float> scale;
  std::vector<int64_t> zero_point;
  int axis = -1;  ///< -1: per tensor
  ir::DType dtype = ir::DType::kInt8;
};

/// Scale and zero point for the real range [rmin, rmax] on `grid`, bit for bit as onnxruntime's
/// compute_scale_zp computes them: the range is widened to include zero (rmin = min(rmin, 0),
/// rmax = max(rmax, 0), in float32), made symmetric when the grid is (both bounds become
/// -+max(|rmin|, |rmax|)), scale = (rmax - rmin) / (qmax - qmin) in double, and the zero point
/// is round(qmin - rmin / scale) in double, rounding half to even, clamped to the grid (for a
/// symmetric grid round((qmin + qmax) / 2), i.e. 0 for int8 and 128 for uint8); the scale is
/// then stored as float32. A double scale below the smallest normal float32 (an all-zero or
/// tiny range) gives scale 1 and zero point 0: scales are never 0, subnormal, infinite or NaN.
/// Throws ArgumentError (naming both bounds) for a NaN or infinite bound or rmin > rmax.
QParams qparams_for_range(float rmin, float rmax, const Grid& grid);

/// Parameters of a constant float32 weight as onnxruntime's quantize_data gives them: per
/// channel along `axis` (axis >= 0; entry c from the exact min and max of the elements whose
/// index along `axis` is c) or per tensor (axis < 0; QParams::axis is then -1), each through
/// qparams_for_range. An empty channel gets scale 1, zero point 0. Throws ArgumentError for a
/// weight that is not float32, an axis >= its rank, or a NaN or infinite element (naming the
/// weight and the channel).
QParams weight_qparams(const ir::Tensor& weight, int axis, const Grid& grid);

// ---- range methods -------------------------------------------------------------------------

/// How a tensor's range is chosen from its statistics. The methods are defined on the
/// histograms of TensorStats with this notation: w = bin_width(); positive bin i holds the
/// values in [i*w, (i+1)*w) (zeros included), negative bin i those in (-(i+1)*w, -i*w];
/// h[i] = positive[i] + negative[i] is the magnitude histogram, N = sum of h = count; n is one
/// more than the index of the last non-empty bin of h; min, max and absmax are the exact
/// extremes. Sums are in double, counts compare as doubles (exact below 2^53). On symmetric
/// grids only max(|range.min|, |range.max|) matters to qparams_for_range.
///
/// - "minmax": [min, max].
/// - "percentile" p: symmetric grid: k = the first bin with h[0] + ... + h[k] >= p / 100 * N,
///   t = (k + 1) * w (the bin's upper edge). Asymmetric grid: on the signed histogram s (the
///   negative bins from the highest magnitude down, then the positive bins: 2 * bins bins,
///   signed bin m covering [(m - bins) * w, (m - bins + 1) * w)) with cumulative counts C,
///   cut = (100 - p) / 200, lo = the lower edge of the first m with C[m] >= cut * N and hi =
///   the upper edge of the first m with C[m] >= (1 - cut) * N. Either way the range, [-t, t]
///   or [lo, hi], is then clamped to [min, max] as onnxruntime's compute_percentile does
///   (which takes the lower edge of the bin where the cumulative share reaches p / 100 on
///   both sides, on bins spanning [0, absmax] or [-absmax, absmax]; the upper edge here makes
///   percentile 100 give minmax).
/// - "entropy" (TensorRT's entropy calibration, "EntropyCalibration2", as NVIDIA's
///   pytorch-quantization _compute_amax_entropy implements it), with L = entropy_levels: on
///   g = h[0..n) with g[0] replaced by g[1] (pytorch-quantization's guard against a spike of
///   exact zeros), for each candidate i in [L, n]: the reference P = g[0..i) with the
///   outliers g[i] + ... + g[n-1] added to P[i-1]; bin j < i belongs to level floor(j * L / i);
///   the candidate Q has, at each bin j with g[j] > 0, the sum of g over j's level divided by
///   the number of non-empty bins of that level (outliers are not in Q), and 0 at empty bins;
///   KL = sum over P[j] > 0 of p[j] * ln(p[j] / q[j]) with p, q = P, Q normalised to sum 1
///   (no smoothing: a bin with P > 0 and Q = 0, i.e. g[i-1] = 0 with outliers, gives +inf).
///   Candidates whose outliers exceed 1% of g's total are left out (tether's guard, not in
///   TensorRT's definition: when most values lie beyond i, P is one spike that Q copies, KL is
///   about 0, and a distribution away from zero, like a Softmax output, would collapse onto its
///   lowest values). The smallest KL wins, ties going to the largest i; t = min(i * w, absmax). With n < L
///   the method gives minmax. (So, as in pytorch-quantization, an outlier above a bulk that
///   fits in fewer than L bins is kept: every candidate below it has an empty last bin.)
///   onnxruntime's variant (calibrate.py get_entropy_threshold, from MXNet) differs: it works
///   on a signed histogram symmetric around zero with bin 0 kept, its candidates are
///   symmetric windows quantized into num_quantized_bins levels over both signs (64 per side
///   by default), merged in equal groups with the remainder in the last level and expanded as
///   truncated integers; it takes the non-empty mask of Q from P (outliers included), smooths
///   P and Q (empty bins get 1e-4, taken from the others) before scipy's entropy, resolves
///   ties to the smallest threshold, and returns the window's edges clamped to [min, max].
/// - "mse": for each candidate k in [0, n), t = min((k + 1) * w, absmax), the range R(t) (see
///   below) and its noise: the squared error of quantize-dequantize on `grid` with
///   qparams_for_range(R(t)) of every bin's values taken at its centre, i.e. the sum over bins
///   of count * (x - q(x))^2 with x = (i + 0.5) * w for positive bin i and -(i + 0.5) * w for
///   negative bin i, q(x) = (clamp(round_half_even(x / scale) + zp, qmin, qmax) - zp) * scale
///   in double (clipped values are thereby counted at their distance to the saturated level).
///   The smallest noise wins, ties going to the largest t.
/// - "sqnr": the range of whichever of minmax, percentile, entropy and mse (with these
///   options) has the highest estimate_sqnr_db, ties going to the earlier in that order.
///
/// Entropy and mse give R(t) = [-t, t] on a symmetric grid and, on an asymmetric one, the
/// extremes clipped to [-t, t]: [clamp(min, -t, t), clamp(max, -t, t)], which is
/// [max(min, -t), min(max, t)] unless every value lies beyond t on one side. Histograms with
/// n > 2048 use every s-th candidate from the top (i = n, n - s, ... for entropy;
/// k = n - 1, n - 1 - s, ... for mse), s = ceil(n / 2048), so that a tensor takes at most
/// tens of milliseconds at any bin count (with 2048 bins, every candidate is tried).
/// Statistics whose every value is zero give [min, max] = [0, 0] under every method.
struct MethodOptions {
  std::string method = "minmax";
  double percentile = 99.999;  ///< in (0, 100], for "percentile" (and "sqnr")
  int entropy_levels = 128;    ///< quantized levels of one sign in the entropy method, >= 2
};

/// The names compute_range accepts: "minmax", "percentile", "entropy", "mse", then "sqnr",
/// which tries the four before it in this order.
const std::vector<std::string>& method_names();

/// A real range [min, max] chosen for a tensor (before widening to include zero).
struct Range {
  float min = 0;
  float max = 0;
};

/// The range `options.method` picks for `stats` quantized on `grid` (see MethodOptions).
/// Empty statistics give [0, 0]. Deterministic: identical statistics give bit-identical
/// ranges. Throws ArgumentError for an unknown method (naming the known ones), a percentile
/// outside (0, 100], entropy_levels < 2, a grid dtype other than int8/uint8, or histograms
/// whose sizes differ from each other.
/// `chosen`, when given, receives the method whose range was taken (for "sqnr", the winner).
Range compute_range(const TensorStats& stats, const MethodOptions& options, const Grid& grid,
                    std::string* chosen = nullptr);

/// Estimated signal-to-quantization-noise ratio in dB of quantizing the histogram with
/// qparams_for_range(range) on `grid`: 10 * log10(signal / noise), signal = sum of
/// count * x^2 and noise = sum of count * (x - q(x))^2 over both histograms, with x and q as
/// in the "mse" method. +inf when the noise is 0 (a histogram of zeros, empty statistics).
/// Throws ArgumentError as qparams_for_range does for the range.
double estimate_sqnr_db(const TensorStats& stats, Range range, const Grid& grid);

/// Share (0..1) of the observed values that fall outside [range.min, range.max] and would be
/// clipped, at bin resolution: the values of a bin are taken as spread uniformly over the
/// bin's part within [stats.min, stats.max] (at one point when that part is a point), so a
/// bin cut by a bound counts in proportion to its part outside, and the range [min, max]
/// clips nothing. Empty statistics give 0; when every value is zero the share is 0 or 1.
/// Throws ArgumentError for a NaN bound or range.min > range.max.
double clipped_fraction(const TensorStats& stats, Range range);

// ---- where Q/DQ go ---------------------------------------------------------------------------

/// Conventions of a quantized model; profile_options() gives named sets.
struct QuantizeOptions {
  std::string profile = "onnxruntime";
  Grid activations{ir::DType::kInt8, false, false};
  Grid weights{ir::DType::kInt8, true, false};
  bool per_channel = true;          ///< weights per output channel
  bool quantize_bias = true;        ///< bias as int32 with scale input_scale * weight_scale
  bool quantize_outputs = true;     ///< Q/DQ on the outputs of quantized ops, not only their inputs
  /// Op types quantized; empty: the profile's list.
  std::vector<std::string> op_types;
  /// Node names kept in float (no Q/DQ on the inputs they read, weights stay float).
  std::vector<std::string> exclude_nodes;
};

/// The profiles: "onnxruntime" (QDQ S8S8 as quantize_static writes it: activations int8
/// asymmetric, weights int8 symmetric, bias int32, Q/DQ on inputs and outputs of quantized
/// ops, data-movement ops sharing their input's parameters), "tensorrt" (symmetric int8
/// everywhere, Q/DQ on the inputs of Conv/Gemm/MatMul/pooling/Add only, bias float) and
/// "ncnn" (symmetric int8, Q/DQ on the inputs of Conv/Gemm/MatMul only, bias float).
/// Throws ArgumentError for another name.
QuantizeOptions profile_options(const std::string& profile);
/// The profile names.
const std::vector<std::string>& profile_names();

/// One node the plan quantizes.
struct PlannedNode {
  std::string node;            ///< node name
  std::string op_type;
  std::vector<std::string> inputs;   ///< activation inputs it reads quantized (the first: the data input)
  std::vector<std::string> outputs;  ///< its outputs given Q/DQ (with quantize_outputs)
  std::string weight;          ///< constant weight input quantized ("" for none)
  int weight_axis = -1;        ///< channel axis of the weight (-1: per tensor)
  std::string bias;            ///< bias input ("" for none or not quantized)
};

/// What quantize_qdq() will quantize: the activations to calibrate (each with the group of
/// tensors that must share one set of parameters) and the nodes and their weights.
struct Plan {
  struct Tensor {
    std::string name;
    int channel_axis = -1;  ///< axis whose channels the calibrator tracks (dead channels)
    int group = 0;          ///< tensors of one group share parameters (their stats are merged)
    /// True for the output of a quantized node: every reader (but excluded nodes) reads the
    /// quantized value. Else only the planned nodes listing it do.
    bool all_readers = false;
    /// For the output of an op that only moves values (Reshape, Transpose, Squeeze,
    /// Unsqueeze, Flatten, DepthToSpace, SpaceToDepth): the planned tensor holding the very same
    /// values, whose statistics stand for it (it is not observed); "" otherwise.
    std::string same_values_as;
  };
  std::vector<Tensor> tensors;  ///< activations to observe and quantize, in graph order
  std::vector<PlannedNode> nodes;
  std::vector<std::string> notes;  ///< why some candidate nodes were not quantized

  /// (name, channel_axis) of every tensor to observe, for Calibrator: all but those with
  /// same_values_as.
  std::vector<std::pair<std::string, int>> observed() const;
};

/// A copy of `model` simplified in standard ONNX before planning: every node named (unnamed
/// ones "<op>_<k>", repeated names "<name>_<k>"), Identity removed, shapes inferred, constants
/// folded, BatchNormalization folded into the conv before it, dead nodes removed. Values keep
/// their names. Like every model the quantizer returns, it has no source_path: it is not the
/// file its source was loaded from.
ir::Model prepare(const ir::Model& model);

/// The quantization plan of a prepared model under `options`. Throws ModelError when the model
/// has no float tensor to quantize, ArgumentError for an excluded node name that does not exist.
Plan plan(const ir::Model& prepared, const QuantizeOptions& options);

/// The part of `plan` that quantizes only what `nodes` read (names of planned nodes;
/// ArgumentError for another name): their entries with their inputs and weights, without their
/// outputs (the inputs of the next nodes). Ranges computed for the whole plan apply unchanged,
/// so each node keeps the parameters it has in the whole model: the error of one such plan is
/// what keeping that node in float would save (layer sensitivity). Planning with more exclude_nodes only ever drops tensors: the
/// ranges of the plan without exclusions cover every such plan.
Plan restrict_plan(const Plan& plan, const std::vector<std::string>& nodes);

/// Per-tensor statistics of a calibration (value name -> stats).
using StatsMap = std::map<std::string, TensorStats>;

/// One tensor's chosen range and the method that chose it.
struct TensorRange {
  Range range;
  std::string method;
};

/// Ranges of every planned tensor: each group's stats merged, then `method` applied, the
/// result shared by the group. Tensors missing from `stats` raise CalibrationError.
std::map<std::string, TensorRange> compute_ranges(const Plan& plan, const StatsMap& stats,
                                                  const MethodOptions& method, const QuantizeOptions& options);

/// A quantized model and the parameters written into it.
struct QuantizedModel {
  ir::Model model;
  std::map<std::string, QParams> activations;  ///< per activation value name
  std::map<std::string, QParams> weights;      ///< per weight initializer name (float name)
  std::vector<std::string> notes;
};

/// Writes the QDQ model: each planned activation T gets QuantizeLinear -> DequantizeLinear
/// (values "T_quantized", "T_dequantized"; parameters "T_scale", "T_zero_point"; nodes
/// "T_QuantizeLinear", "T_DequantizeLinear") read by its quantized consumers; each planned
/// weight W is stored as "W_quantized" (int8, with "W_scale" and "W_zero_point") and read
/// through a DequantizeLinear whose output is "W_dequantized"; biases likewise as int32 (no
/// zero point). The float W is dropped once nothing else reads it. A name already taken gets a
/// suffix "_1", "_2", ... (a weight read along two axes, a bias read with two input scales).
/// Graph outputs keep their float values. The result passes onnx.checker's full check.
/// Throws ArgumentError when `prepared` lacks a node, value or constant the plan names (a plan
/// made for another model), CalibrationError for a planned tensor without a range.
QuantizedModel quantize_qdq(const ir::Model& prepared, const Plan& plan,
                            const std::map<std::string, TensorRange>& ranges, const QuantizeOptions& options);

/// A copy of a QDQ model where every DequantizeLinear of constants is replaced by its float
/// result: the model the float kernels of the CPU engine run fast, with the same values.
ir::Model fold_dequantized_constants(const ir::Model& qdq);

// ---- calibration ---------------------------------------------------------------------------

struct CalibratorOptions {
  int bins = 2048;      ///< histogram bins per sign
  int threads = 0;      ///< engine threads (0: physical cores)
  /// Samples with NaN or infinity in an observed tensor: false raises CalibrationError naming
  /// the tensor and the sample index; true leaves them out and counts them.
  bool skip_nonfinite = false;
};

/// Observes tensors of a float model batch by batch on the CPU engine.
class Calibrator {
 public:
  /// Compiles `model` so that each of `tensors` (value name, channel axis: >= 0, or -1 for
  /// none) stays computed. Throws ArgumentError for a name that is no float32 value of the
  /// model, or a channel axis below -1 or not below the tensor's rank (checked here where the
  /// rank is known, else at the first batch).
  Calibrator(const ir::Model& model, const std::vector<std::pair<std::string, int>>& tensors,
             const CalibratorOptions& options);
  ~Calibrator();
  Calibrator(const Calibrator&) = delete;
  Calibrator& operator=(const Calibrator&) = delete;

  /// Runs one batch (samples along axis 0 of every input) and adds what the observed
  /// tensors held. Input errors are ArgumentError naming the input; a non-finite value is a
  /// CalibrationError naming the tensor and the sample index in the whole stream (or, with
  /// skip_nonfinite, the sample is left out). Safe to call from one thread at a time.
  void observe(const std::vector<std::pair<std::string, ir::Tensor>>& batch);

  const StatsMap& stats() const { return stats_; }
  int64_t samples() const { return samples_; }  ///< samples observed (skipped ones included)
  int64_t batches() const { return batches_; }
  /// Sample indices left out for non-finite values, in the stream of the samples observed and
  /// merged in that order (a merged state's samples follow the ones before it).
  const std::vector<int64_t>& skipped() const { return skipped_; }

  /// The state as bytes: every tensor's statistics and the counters; merge() takes it.
  std::string state() const;
  /// Forgets every statistic and counter, keeping the compiled model: the next state() holds
  /// only what is observed from now on (a state per batch, for a worker of a larger job).
  void reset();
  /// Adds a state from another calibrator of the same model and tensors. The whole state is
  /// checked before any of it is added, so an error changes nothing: ArgumentError when the
  /// tensors, the bins or a tensor's channel count differ; CalibrationError for bytes that are
  /// not a state, or whose contents no calibrator writes (counts the bins do not hold,
  /// extremes, exponent or skipped indices that disagree).
  void merge(const std::string& state);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  StatsMap stats_;
  int64_t samples_ = 0;
  int64_t batches_ = 0;
  std::vector<int64_t> skipped_;
};

// ---- calibration files -----------------------------------------------------------------------

/// TensorRT's calibration cache: the header line (it must start with "TRT-", as in
/// "TRT-<version>-EntropyCalibration2") and one line per tensor, sorted by name,
/// "name: <8 lowercase hex digits>": the float32 bits of the scale as one big-endian uint32
/// ("%08x"), where TensorRT's scale is amax / 127 (1/127 gives "3c010204"). Names may hold
/// spaces and ": " (the reader splits at the last ": "). Throws ArgumentError for an empty
/// name, a line break or NUL byte in a name or the header, or a NaN, infinite or negative scale.
std::string write_tensorrt_cache(const std::map<std::string, float>& scales,
                                 const std::string& header = "TRT-8601-EntropyCalibration2");
/// Parses a TensorRT calibration cache (the header is checked, not returned; blank lines are
/// skipped; lines end at "\n", "\r\n" or a lone "\r"; 1 to 8 hex digits of either case are
/// accepted). Throws ParseError naming the line number and text of a missing header, a line
/// that is not valid UTF-8 or holds a NUL byte, a line without ": ", an empty name, a value that is not hex or
/// not a finite non-negative float, or a name that appears twice.
std::map<std::string, float> read_tensorrt_cache(const std::string& text);

/// ncnn's int8 table as ncnn2table writes it: per quantized layer, "<layer>_param_0" followed by
/// one weight scale per output channel, and "<layer>" followed by its input's scale; ncnn
/// scales are 127 / threshold.
struct NcnnTable {
  std::map<std::string, std::vector<float>> weight_scales;  ///< layer -> per-channel scales
  std::map<std::string, float> input_scales;                ///< layer -> bottom blob scale
};
/// The table's text in ncnn2table's layout: every "<layer>_param_0 s0 s1 ..." line, then every
/// "<layer> s" line, each group sorted by layer name, fields separated by one space. Numbers are
/// written in the shortest form that reads back as the same float (ncnn2table prints "%f",
/// which drops digits; ncnn's reader accepts both). Throws ArgumentError for a layer name that
/// is empty, holds white space, a NUL byte or "_param_" (ncnn would split it or take it for a weight
/// line), or is longer than ncnn's 255-character keys allow, for a layer without weight
/// scales, and for a NaN, zero or negative scale.
std::string write_ncnn_table(const NcnnTable& table);
/// Parses an ncnn table (fields separated by spaces or tabs, blank lines skipped). Throws
/// ParseError naming the line number and text of a line that is not valid UTF-8 or holds a NUL byte, a line with
/// no scale, a field that is not a number, a NaN, zero, negative or -inf scale or one past
/// float32's range (+inf is read: ncnn2table writes it for an all-zero channel), an input line with more than one scale, a "_param_N" line other than "_param_0"
/// (ncnn's MultiHeadAttention entries), or a layer that appears twice.
NcnnTable read_ncnn_table(const std::string& text);

}  // namespace tether::quant
