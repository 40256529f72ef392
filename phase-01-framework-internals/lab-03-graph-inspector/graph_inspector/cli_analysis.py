"""The analysis commands of :mod:`graph_inspector.cli`: ``quant-debug`` and ``profile``."""

from __future__ import annotations

import argparse
from pathlib import Path

from phase01_common.cli import prepare_out_dir

from graph_inspector.cli_checks import CliError, checked_savedmodel, tensorboard_command
from graph_inspector.errors import NotASavedModelError
from graph_inspector.quiet import native_stderr_captured


def quant_debug(args: argparse.Namespace) -> int:
    folder = checked_savedmodel(args.savedmodel_dir)
    import numpy as np

    from graph_inspector.quant_debug import deny_list, layer_errors, selective_int8
    from graph_inspector.savedmodel import load_serving_fn, probe_inputs_from_signature
    from graph_inspector.tflite import (
        TFLiteModel,
        convert_savedmodel_to_tflite,
        representative_from,
    )

    with native_stderr_captured():
        try:
            reference = load_serving_fn(folder, args.signature)
        except NotASavedModelError as exc:
            raise CliError(str(exc)) from exc
        inputs = probe_inputs_from_signature(reference.signature, batch=args.samples)
        calibration = representative_from(inputs)
        layers = layer_errors(folder, calibration, args.signature)
        int8 = convert_savedmodel_to_tflite(folder, "int8", args.signature, calibration)
        deny = deny_list(int8, layers, args.deny)
        models = {"int8": int8}
        every_layer_denied = {layer.tensor for layer in layers} <= set(deny)
        if not every_layer_denied:  # the debugger needs one int8 layer left
            models[f"int8 with {', '.join(deny)} in float"] = selective_int8(
                folder, calibration, deny, args.signature
            )
        expected = reference(inputs)
        scores = {}
        for name, content in models.items():
            got = TFLiteModel(content, args.signature).predict_outputs(inputs)
            scores[name] = max(
                float(np.linalg.norm(got[k] - v) / max(np.linalg.norm(v), 1e-12))
                for k, v in expected.items()
            )
    print(f"int8 layer errors of {folder} ({args.samples} random samples), worst first:")
    print(f"  {'layer output':<40}{'op':<18}{'MSE':>12}{'RMSE/step':>11}")
    for layer in layers:
        print(
            f"  {layer.tensor[:39]:<40}{layer.op[:17]:<18}{layer.mean_squared_error:>12.4g}"
            f"{layer.rmse_over_scale:>11.3f}"
        )
    for name, rel in scores.items():
        print(f"{name}: relative error vs TensorFlow {rel:.3g}")
    if every_layer_denied:
        print(
            f"the model has {len(layers)} quantized layer(s); keeping the {args.deny} worst "
            "and their readers in float leaves none in int8: the float32 model is that fix"
        )
    return 0


def profile(args: argparse.Namespace) -> int:
    prepare_out_dir(args.logdir, "--logdir", create=False)
    folder = checked_savedmodel(args.savedmodel_dir)
    from graph_inspector.compiler_stats import example_inputs
    from graph_inspector.profile import join_with_costs, profile_function, roofline_probe
    from graph_inspector.savedmodel import load_savedmodel, signature_of
    from graph_inspector.walker import inspect_concrete_function

    try:
        loaded = load_savedmodel(folder)
        signature = signature_of(loaded, folder, args.signature)
    except NotASavedModelError as exc:
        raise CliError(str(exc)) from exc
    names = sorted(signature.structured_input_signature[1])
    inputs = dict(zip(names, example_inputs(signature, args.unknown_dim), strict=True))
    timings = profile_function(lambda: signature(**inputs), (), args.steps, Path(args.logdir))
    report = inspect_concrete_function(signature, unknown_dim=args.unknown_dim)
    roof = roofline_probe()
    print(
        f"roofline of this CPU: peak {roof.peak_flops / 1e9:.1f} GFLOP/s (float32 matmul), "
        f"bandwidth {roof.bandwidth / 1e9:.1f} GB/s; {args.steps} steps profiled"
    )
    print(f"  {'op type':<24}{'µs/step':>10}{'share':>7}{'GFLOP/s':>9}{'GB/s':>8}{'of roof':>8}")
    for row in join_with_costs(timings, report, args.steps):
        if row.gflops is None:
            perf = f"{'not costed: ' + row.reason[:40]:>32}"
        else:
            roofline = roof.attainable(row.intensity) if row.intensity else roof.bandwidth
            of_roof = (row.gflops * 1e9 / roofline) if row.intensity else 0.0
            perf = f"{row.gflops:>9.2f}{row.gbytes:>8.2f}{of_roof:>8.0%}"
        print(f"  {row.op_type[:23]:<24}{row.seconds_per_step * 1e6:>10.1f}{row.share:>7.0%}{perf}")
    print(f"trace for TensorBoard's profile plugin: {tensorboard_command()} --logdir {args.logdir}")
    return 0
