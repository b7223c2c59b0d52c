/* reference/ops_extra: scalar kernels (see reference/ops.h). */
#include "reference/ops.h"

const kiln_op_def kiln_ref_ops_extra[] = {
    {0},
};
