// The ops module: CPU kernels of a Llama forward pass.
#pragma once

#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/quant.h"
#include "ops/rope.h"
