/* tcl_variables.c — the functions of an export of variable sizes (`tcl export --dynamic
 * T=1..1024`): NAME_run_sizes, which takes the variables' values at run time, and
 * NAME_tensor_bytes. Layer: the exported runtime; included by NAME.c after tcl_runtime.c (see
 * there), only when the model was exported with dynamic sizes. NAME.c defines the variables'
 * names, mins and maxes (NAME_variables, NAME_variable_min, NAME_variable_max, NUM_VARIABLES
 * of them) before it includes this file.
 *
 * The kernels were compiled once for the variables: each reads their values from an int32
 * buffer in the arena, which run_plan fills from `sizes` before the step (VALUE_FILLS). The
 * arena and the staging of inputs and outputs were planned at the variables' largest values,
 * so any sizes in range fit. */
#ifndef MODEL
#error "tcl_variables.c is included by an exported model's NAME.c, after tcl_runtime.c; it is not compiled alone"
#endif

/* NULL when every size is in its variable's range, else the failure's status (the message
 * names the variable and its range). */
static int check_sizes(MODEL *m, const char *who, const int64_t *sizes) {
    if (!sizes) return fail(m, STATUS(ERR_ARGUMENT), "%s: sizes is NULL (it holds the values of %s_variables)", who,
                            MODEL_NAME);
    for (int v = 0; v < NUM_VARIABLES; v++)
        if (sizes[v] < API(variable_min)[v] || sizes[v] > API(variable_max)[v])
            return fail(m, STATUS(ERR_ARGUMENT), "%s: %s is %lld, outside its range %lld..%lld", who, API(variables)[v],
                        (long long)sizes[v], (long long)API(variable_min)[v], (long long)API(variable_max)[v]);
    return STATUS(OK);
}

int API(run_sizes)(MODEL *m, const int64_t *sizes, const void *const *inputs, void *const *outputs) {
    if (!m) return fail(NULL, STATUS(ERR_ARGUMENT), MODEL_NAME "_run_sizes: the instance is NULL");
    int status = check_sizes(m, MODEL_NAME "_run_sizes", sizes);
    if (status != STATUS(OK)) return status;
    return run_plan(m, MODEL_NAME "_run_sizes", &PLANS[0], sizes, inputs, outputs);
}

size_t API(tensor_bytes)(const API(tensor_info) *info, const int64_t *sizes) {
    if (!info) return 0;
    if (info->dims && (!sizes || check_sizes(NULL, MODEL_NAME "_tensor_bytes", sizes) != STATUS(OK))) return 0;
    return tensor_bytes_at(info, sizes);
}
