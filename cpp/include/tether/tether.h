// tether/tether.h: the whole public C++ API in one include.
#pragma once

#include "tether/attribute.h"
#include "tether/builder.h"
#include "tether/dtype.h"
#include "tether/engine.h"
#include "tether/error.h"
#include "tether/graph.h"
#include "tether/model.h"
#include "tether/onnx.h"
#include "tether/parity.h"
#include "tether/passes.h"
#include "tether/quant.h"
#include "tether/shape.h"
#include "tether/shape_inference.h"
#include "tether/summary.h"
#include "tether/tensor.h"
#include "tether/type.h"
