/* fuse/kinds: the kind table. Kinds follow TVM's FuseOps (relay op
 * patterns); the roles say what the kernel spec can do with each op. */
#include "fuse/kinds.h"

#include <string.h>

#define EW(op) {op, KILN_FUSE_ELEMWISE, 0}
#define BC(op) {op, KILN_FUSE_BROADCAST, 0}
#define VIEW(op) {op, KILN_FUSE_INJECTIVE, KILN_FUSE_VIEW}
#define RESHAPE(op) {op, KILN_FUSE_INJECTIVE, KILN_FUSE_VIEW | KILN_FUSE_RESHAPE}
#define INJ(op) {op, KILN_FUSE_INJECTIVE, 0}
#define NOSPEC(op, kind) {op, kind, KILN_FUSE_NOSPEC}
#define RED(op) {op, KILN_FUSE_REDUCTION, 0}
#define COMPOSITE(op) {op, KILN_FUSE_REDUCTION, KILN_FUSE_COMPOSITE}
#define ANCHOR(op) {op, KILN_FUSE_OUT_EWISE, 0}
#define POOL(op) {op, KILN_FUSE_OUT_EWISE, KILN_FUSE_POOL}
#define OPAQUE(op) {op, KILN_FUSE_OPAQUE, 0}

const kiln_fuse_kind_def kiln_fuse_kinds[] = {
    /* elementwise: unary math, activations, predicates */
    EW("Abs"), EW("Neg"), EW("Sqrt"), EW("Exp"), EW("Log"), EW("Reciprocal"), EW("Floor"), EW("Ceil"),
    EW("Relu"), EW("LeakyRelu"), EW("Elu"), EW("Selu"), EW("Sigmoid"), EW("HardSigmoid"), EW("Tanh"),
    EW("Softplus"), EW("Softsign"), EW("Erf"), EW("Sign"), EW("HardSwish"), EW("ThresholdedRelu"), EW("Celu"),
    EW("Round"), EW("Sin"), EW("Cos"), EW("Tan"), EW("Asin"), EW("Acos"), EW("Atan"), EW("Sinh"), EW("Cosh"),
    EW("Asinh"), EW("Acosh"), EW("Atanh"), EW("Shrink"), EW("IsNaN"), EW("IsInf"), EW("Not"), EW("Clip"),
    EW("Dropout"),
    /* broadcast: binary / variadic with numpy broadcasting, per-channel BN */
    BC("Add"), BC("Sub"), BC("Mul"), BC("Div"), BC("Mod"), BC("Pow"), BC("PRelu"), BC("BitShift"), BC("Min"),
    BC("Max"), BC("Sum"), BC("Mean"), BC("Equal"), BC("Greater"), BC("Less"), BC("GreaterOrEqual"),
    BC("LessOrEqual"), BC("And"), BC("Or"), BC("Xor"), BC("Where"), BC("BatchNormalization"),
    NOSPEC("QuantizeLinear", KILN_FUSE_BROADCAST), NOSPEC("DequantizeLinear", KILN_FUSE_BROADCAST),
    /* injective: views (index maps), casts, and the rest */
    RESHAPE("Reshape"), RESHAPE("Flatten"), RESHAPE("Squeeze"), RESHAPE("Unsqueeze"), RESHAPE("Identity"),
    VIEW("Transpose"), VIEW("Slice"), VIEW("Expand"), VIEW("Split"), VIEW("Gather"), VIEW("Pad"), INJ("Cast"),
    INJ("CastLike"), NOSPEC("Concat", KILN_FUSE_INJECTIVE), NOSPEC("Tile", KILN_FUSE_INJECTIVE),
    NOSPEC("DepthToSpace", KILN_FUSE_INJECTIVE), NOSPEC("SpaceToDepth", KILN_FUSE_INJECTIVE),
    NOSPEC("ReverseSequence", KILN_FUSE_INJECTIVE), NOSPEC("GatherElements", KILN_FUSE_INJECTIVE),
    NOSPEC("GatherND", KILN_FUSE_INJECTIVE), NOSPEC("Trilu", KILN_FUSE_INJECTIVE),
    NOSPEC("Resize", KILN_FUSE_INJECTIVE), NOSPEC("Upsample", KILN_FUSE_INJECTIVE),
    /* reductions */
    RED("ReduceSum"), RED("ReduceMean"), RED("ReduceMax"), RED("ReduceMin"), RED("ReduceProd"), RED("ReduceL1"),
    RED("ReduceL2"), RED("ReduceLogSum"), RED("ReduceLogSumExp"), RED("ReduceSumSquare"), COMPOSITE("Softmax"),
    COMPOSITE("LogSoftmax"), COMPOSITE("LayerNormalization"), COMPOSITE("InstanceNormalization"),
    NOSPEC("ArgMax", KILN_FUSE_REDUCTION), NOSPEC("ArgMin", KILN_FUSE_REDUCTION),
    NOSPEC("Hardmax", KILN_FUSE_REDUCTION), NOSPEC("LpNormalization", KILN_FUSE_REDUCTION),
    NOSPEC("MeanVarianceNormalization", KILN_FUSE_REDUCTION),
    /* out-elementwise-fusable anchors */
    ANCHOR("Conv"), ANCHOR("ConvTranspose"), ANCHOR("MatMul"), ANCHOR("Gemm"), ANCHOR("ConvInteger"),
    ANCHOR("MatMulInteger"), ANCHOR("QLinearConv"), ANCHOR("QLinearMatMul"), ANCHOR("Einsum"), POOL("MaxPool"),
    POOL("AveragePool"), POOL("LpPool"), POOL("GlobalAveragePool"), POOL("GlobalMaxPool"), POOL("GlobalLpPool"),
    /* opaque */
    OPAQUE("Constant"), OPAQUE("ConstantOfShape"), OPAQUE("Shape"), OPAQUE("Size"), OPAQUE("Range"),
    OPAQUE("EyeLike"), OPAQUE("OneHot"), OPAQUE("Compress"), OPAQUE("NonZero"), OPAQUE("ScatterND"),
    OPAQUE("ScatterElements"), OPAQUE("Scatter"), OPAQUE("TopK"), OPAQUE("CumSum"), OPAQUE("Det"), OPAQUE("LRN"),
    OPAQUE("MaxRoiPool"), OPAQUE("MaxUnpool"), OPAQUE("RNN"), OPAQUE("GRU"), OPAQUE("LSTM"),
    OPAQUE("NonMaxSuppression"), OPAQUE("RoiAlign"), OPAQUE("GridSample"), OPAQUE("Unique"),
    OPAQUE("NegativeLogLikelihoodLoss"), OPAQUE("SoftmaxCrossEntropyLoss"), OPAQUE("DynamicQuantizeLinear"),
    OPAQUE("HannWindow"), OPAQUE("HammingWindow"), OPAQUE("BlackmanWindow"), OPAQUE("DFT"), OPAQUE("STFT"),
    OPAQUE("MelWeightMatrix"), OPAQUE("TfIdfVectorizer"),
    {NULL, KILN_FUSE_OPAQUE, 0},
};

const kiln_fuse_kind_def *kiln_fuse_kind_find(const char *domain, const char *op_type) {
  if (!op_type || (domain && *domain && strcmp(domain, "ai.onnx"))) return NULL;
  for (const kiln_fuse_kind_def *d = kiln_fuse_kinds; d->op_type; d++)
    if (!strcmp(d->op_type, op_type)) return d;
  return NULL;
}

const kiln_fuse_kind_def *kiln_fuse_kind_def_of(const kiln_node *n) {
  static const kiln_fuse_kind_def bn_training = {"BatchNormalization", KILN_FUSE_OPAQUE, 0};
  const kiln_fuse_kind_def *d = kiln_fuse_kind_find(n->domain, n->op_type);
  if (d && !strcmp(d->op_type, "BatchNormalization") && kiln_attr_int(n, "training_mode", 0) != 0) return &bn_training;
  return d;
}

kiln_fuse_kind kiln_fuse_kind_of(const kiln_node *n) {
  const kiln_fuse_kind_def *d = kiln_fuse_kind_def_of(n);
  return d ? d->kind : KILN_FUSE_OPAQUE;
}

const char *kiln_fuse_kind_name(kiln_fuse_kind k) {
  switch (k) {
  case KILN_FUSE_ELEMWISE: return "elementwise";
  case KILN_FUSE_BROADCAST: return "broadcast";
  case KILN_FUSE_INJECTIVE: return "injective";
  case KILN_FUSE_REDUCTION: return "reduction";
  case KILN_FUSE_OUT_EWISE: return "out-elementwise";
  default: return "opaque";
  }
}
