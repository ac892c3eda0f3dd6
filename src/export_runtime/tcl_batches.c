/* tcl_batches.c — the functions of an export of several batch sizes: NAME_run_batch,
 * NAME_batch_inputs and NAME_batch_outputs over the generated PLANS (one per batch size,
 * NUM_PLANS of them). Layer: the exported runtime; included by NAME.c after tcl_runtime.c
 * (see there), only when the model was exported with batch_sizes. */
#ifndef MODEL
#error "tcl_batches.c is included by an exported model's NAME.c, after tcl_runtime.c; it is not compiled alone"
#endif

static const plan_info *plan_for(int64_t batch) {
    for (int p = 0; p < NUM_PLANS; p++)
        if (PLANS[p].batch == batch) return &PLANS[p];
    return NULL;
}

int API(run_batch)(MODEL *m, int64_t batch, const void *const *inputs, void *const *outputs) {
    if (!m) return fail(NULL, STATUS(ERR_ARGUMENT), MODEL_NAME "_run_batch: the instance is NULL");
    const plan_info *plan = plan_for(batch);
    if (!plan)
        return fail(m, STATUS(ERR_ARGUMENT), MODEL_NAME "_run_batch: batch size %lld was not exported (see "
                    MODEL_NAME "_batch_sizes)", (long long)batch);
    return run_plan(m, MODEL_NAME "_run_batch", plan, NULL, inputs, outputs);
}

const API(tensor_info) *API(batch_inputs)(int64_t batch) {
    const plan_info *plan = plan_for(batch);
    return plan ? plan->inputs : NULL;
}

const API(tensor_info) *API(batch_outputs)(int64_t batch) {
    const plan_info *plan = plan_for(batch);
    return plan ? plan->outputs : NULL;
}
