/* tcl_weights_embedded.c — load_weights of a model whose weights are compiled into the program
 * (NAME_weights.c, the generated WEIGHT_DATA) or that has none (WEIGHT_DATA is NULL). Layer:
 * the exported runtime; included by NAME.c after tcl_runtime.c (see there). */
#ifndef MODEL
#error "tcl_weights_embedded.c is included by an exported model's NAME.c, after tcl_runtime.c; it is not compiled alone"
#endif

static int load_weights(MODEL *m, const char *path) {
    if (path)
        return fail(m, STATUS(ERR_ARGUMENT),
                    MODEL_NAME "_open: this model's weights are embedded; weights_path must be NULL, not \"%s\"", path);
    m->weights = WEIGHT_DATA;
    return STATUS(OK);
}
