#!/usr/bin/env python3
"""Reference data for diffc's schedulers and torch's CPU random numbers, with diffusers and torch as
the oracles (tests/test_scheduler.c, tests/test_torch_rng.c).

Usage:  python tools/make_fixtures_scheduler.py --out tests/fixtures/schedulers
(with the fixture venv's python: tools/python-env.sh).  Writes, deterministically:

  torch_rng.json, torch_rng.safetensors
      torch.randn(n, generator=torch.Generator().manual_seed(seed)) for several seeds and sizes: per
      size two successive draws from a fresh generator, and one generator through all the sizes in
      turn (twice), so that the n < 16 path's cached normal crosses calls.  Draws of up to 1024
      values are stored; larger ones as the SHA-256 of their float32 little-endian bytes.
  configs/<name>.json
      scheduler_config.json files: hand-written ones as the released pipelines ship them, and ones
      written by diffusers' save_config (every argument, -Infinity included).
  cases.json, <case>.safetensors
      one denoising loop per case, as StableDiffusionPipeline runs it: latents =
      randn(shape, generator) * init_noise_sigma, then per loop index i: x = scale_model_input(
      latents, t), a stand-in model output = x * coef[i] + table, latents = step(output, t,
      latents, generator=..., eta=0).  Stored: timesteps (as float32, what the UNet receives),
      init_noise_sigma, the initial latents, coef, table, every step's scaled input
      (input.<i>) and sample (sample.<i>).
      FlowMatchEulerDiscreteScheduler's cases set their timesteps as a pipeline does ("pipeline"
      in cases.json): "flux" as FluxPipeline (sigmas np.linspace(1, 1/N, N) unless the config's
      use_flow_sigmas, mu = calculate_shift(image_seq_len, the config's base/max values)), "sd3"
      as StableDiffusion3Pipeline (no sigmas; mu only with use_dynamic_shifting); the mu passed is
      recorded, and the scheduler's sigmas (with the final one) are stored as "sigmas".  The flow
      class has neither scale_model_input nor init_noise_sigma: the input is the latents, the
      noise unscaled.
      CogVideoXDPMScheduler's step is called as CogVideoXPipeline calls it: with the previous
      step's pred_original_sample and the previous loop timestep (None at the first step).
  cogvideox_dynamic_cfg.json
      CogVideoXPipeline's use_dynamic_cfg guidance scale for a few guidance scales and step
      counts at each timestep of the CogVideoX-2b scheduler: the expression of the pipeline's
      source (checked to be there), in Python floats.

LMSDiscreteScheduler integrates its coefficients with scipy.integrate.quad(f, a, b, epsrel=1e-4);
scipy is not in the fixture venv, so quad is QUADPACK's dqagse first stage (the 21-point
Gauss-Kronrod estimate and its acceptance test, in dqk21's summation order), which is what scipy
returns for these integrands (polynomials of degree < 4): the stand-in raises if the test would
ask for more, and every result is checked against mpmath's integral of the same function.
"""

import argparse
import hashlib
import json
import os
import tempfile
import types

import numpy as np
import torch
from safetensors.numpy import save_file

SHAPE = (2, 4, 3, 5)  # 120 values: not a multiple of 16, so randn's ragged tail is exercised

# ---- scipy.integrate.quad for LMSDiscreteScheduler -------------------------------------------

XGK = [0.995657163025808080735527280689003, 0.973906528517171720077964012084452,
       0.930157491355708226001207180059508, 0.865063366688984510732096688423493,
       0.780817726586416897063717578345042, 0.679409568299024406234327365114874,
       0.562757134668604683339000099272694, 0.433395394129247190799265943165784,
       0.294392862701460198131126603103866, 0.148874338981631210884826001129720,
       0.000000000000000000000000000000000]
WGK = [0.011694638867371874278064396062192, 0.032558162307964727478818972459390,
       0.054755896574351996031381300244580, 0.075039674810919952767043140916190,
       0.093125454583697605535065465083366, 0.109387158802297641899210590325805,
       0.123491976262065851077600525452488, 0.134709217311473325928054001771707,
       0.142775938577060080797094273138717, 0.147739104901338491374841515972068,
       0.149445554002916905664936468389821]
WG = [0.066671344308688137593568809893332, 0.149451349150580593145776339657697,
      0.219086362515982043995534934228163, 0.269266719309996355091226921569469,
      0.295524224714752870173892994651338]
EPMACH = 2.220446049250313e-16
UFLOW = 2.2250738585072014e-308


def dqk21(f, a, b):
    centr = 0.5 * (a + b)
    hlgth = 0.5 * (b - a)
    dhlgth = abs(hlgth)
    resg = 0.0
    fc = float(f(centr))
    resk = WGK[10] * fc
    resabs = abs(resk)
    fv1, fv2 = [0.0] * 10, [0.0] * 10
    for j in range(1, 6):  # QUADPACK's 1-based jtw = 2j: the Gauss nodes
        jtw = 2 * j - 1
        absc = hlgth * XGK[jtw]
        f1, f2 = float(f(centr - absc)), float(f(centr + absc))
        fv1[jtw], fv2[jtw] = f1, f2
        fsum = f1 + f2
        resg = resg + WG[j - 1] * fsum
        resk = resk + WGK[jtw] * fsum
        resabs = resabs + WGK[jtw] * (abs(f1) + abs(f2))
    for j in range(1, 6):  # jtwm1 = 2j - 1: the other Kronrod nodes
        jtwm1 = 2 * j - 2
        absc = hlgth * XGK[jtwm1]
        f1, f2 = float(f(centr - absc)), float(f(centr + absc))
        fv1[jtwm1], fv2[jtwm1] = f1, f2
        fsum = f1 + f2
        resk = resk + WGK[jtwm1] * fsum
        resabs = resabs + WGK[jtwm1] * (abs(f1) + abs(f2))
    reskh = resk * 0.5
    resasc = WGK[10] * abs(fc - reskh)
    for j in range(10):
        resasc = resasc + WGK[j] * (abs(fv1[j] - reskh) + abs(fv2[j] - reskh))
    result = resk * hlgth
    resabs = resabs * dhlgth
    resasc = resasc * dhlgth
    abserr = abs((resk - resg) * hlgth)
    if resasc != 0.0 and abserr != 0.0:
        abserr = resasc * min(1.0, (200.0 * abserr / resasc) ** 1.5)
    if resabs > UFLOW / (50.0 * EPMACH):
        abserr = max((EPMACH * 50.0) * resabs, abserr)
    return result, abserr, resabs, resasc


def quad(f, a, b, args=(), epsabs=1.49e-8, epsrel=1.49e-8, limit=50, **unused):
    import mpmath
    a, b = float(a), float(b)  # diffusers passes 0-d float32 tensors; scipy reads them as doubles
    result, abserr, defabs, resasc = dqk21(f, a, b)
    errbnd = max(epsabs, epsrel * abs(result))
    roundoff = abserr <= 100.0 * EPMACH * defabs and abserr > errbnd
    if not (roundoff or (abserr <= errbnd and abserr != resasc) or abserr == 0.0):
        raise SystemExit(f"quad stand-in: dqagse would subdivide [{a}, {b}] (err {abserr}, bound {errbnd})")
    exact = float(mpmath.quad(lambda x: float(f(float(x))), [a, b]))
    if abs(result - exact) > 1e-5 * max(abs(exact), 1e-3 * abs(b - a)):
        raise SystemExit(f"quad stand-in: {result} differs from mpmath's {exact}")
    return result, abserr


def lms_class():
    """LMSDiscreteScheduler with the quad stand-in in place of scipy.  Without scipy the module
    never binds `integrate` (diffusers tests for scipy when it is imported, whatever sys.modules
    holds later): bind the stand-in there, as make_fixtures_pipeline.py does; with scipy installed,
    diffusers' own binding is kept."""
    import diffusers.schedulers.scheduling_lms_discrete as lms
    if not hasattr(lms, "integrate"):
        lms.integrate = types.SimpleNamespace(quad=quad)
    return lms.LMSDiscreteScheduler


def scheduler_class(name):
    if name == "LMSDiscreteScheduler":
        return lms_class()
    import diffusers
    return getattr(diffusers, name)


# ---- torch's random numbers ------------------------------------------------------------------

RNG_SEEDS = [0, 1, 42, 2**32 + 5, 0xFEDCBA9876543210]
RNG_SIZES = [1, 7, 15, 16, 17, 31, 100, 4 * 4 * 8 * 8, 2 * 4 * 64 * 64]
RNG_STORED_MAX = 1024


def make_rng(out):
    tensors, draws = {}, []

    def record(kind, seed, index, n, values):
        d = {"kind": kind, "seed": str(seed), "index": index, "n": n}
        arr = values.numpy().astype("<f4")
        if n <= RNG_STORED_MAX:
            d["tensor"] = f"{kind}.{seed}.{index}"
            tensors[d["tensor"]] = arr
        else:
            d["sha256"] = hashlib.sha256(arr.tobytes()).hexdigest()
        draws.append(d)

    for seed in RNG_SEEDS:
        for n in RNG_SIZES:  # two successive draws from a fresh generator
            g = torch.Generator().manual_seed(seed)
            for k in range(2):
                record(f"fresh{n}", seed, k, n, torch.randn(n, generator=g))
        g = torch.Generator().manual_seed(seed)  # one generator through every size, twice
        for k, n in enumerate(RNG_SIZES + RNG_SIZES):
            record("sequence", seed, k, n, torch.randn(n, generator=g))
    save_file(tensors, os.path.join(out, "torch_rng.safetensors"))
    with open(os.path.join(out, "torch_rng.json"), "w") as f:
        json.dump({"description": "torch.randn(n, generator=torch.Generator().manual_seed(seed)), float32, "
                   "bitwise; kind freshN: two successive draws of N from a fresh generator; kind "
                   "sequence: one generator through the sizes in order",
                   "draws": draws}, f, indent=1)
        f.write("\n")


# ---- scheduler configs -----------------------------------------------------------------------

# As the released pipelines ship them (runwayml SD1.5, stabilityai SDXL base, SD2.1).
SD15_PNDM = {"_class_name": "PNDMScheduler", "_diffusers_version": "0.6.0", "beta_end": 0.012,
             "beta_schedule": "scaled_linear", "beta_start": 0.00085, "num_train_timesteps": 1000,
             "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1, "trained_betas": None,
             "clip_sample": False}
SDXL_EULER = {"_class_name": "EulerDiscreteScheduler", "_diffusers_version": "0.19.0.dev0", "beta_end": 0.012,
              "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
              "interpolation_type": "linear", "num_train_timesteps": 1000, "prediction_type": "epsilon",
              "sample_max_value": 1.0, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
              "timestep_spacing": "leading", "trained_betas": None, "use_karras_sigmas": False}
SD21_DDIM = {"_class_name": "DDIMScheduler", "_diffusers_version": "0.8.0", "beta_end": 0.012,
             "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
             "num_train_timesteps": 1000, "prediction_type": "v_prediction", "set_alpha_to_one": False,
             "skip_prk_steps": True, "steps_offset": 1, "trained_betas": None}
SD_BETAS = {"beta_start": 0.00085, "beta_end": 0.012, "beta_schedule": "scaled_linear"}


def saved(cls_name, extra=None, **kwargs):
    """A config as save_config writes it (every argument, _class_name, _diffusers_version), plus
    extra keys (another class's, which from_config keeps as hidden config)."""
    return ("save_config", cls_name, kwargs, extra or {})


CONFIGS = {
    "sd15_pndm": SD15_PNDM,
    "sdxl_euler": SDXL_EULER,
    "sd21_ddim": SD21_DDIM,
    "pndm_prk": saved("PNDMScheduler"),
    "pndm_prk_v_trailing": saved("PNDMScheduler", prediction_type="v_prediction", timestep_spacing="trailing",
                                 **SD_BETAS),
    "pndm_linspace": saved("PNDMScheduler", skip_prk_steps=True, timestep_spacing="linspace", **SD_BETAS),
    "euler_v_trailing": saved("EulerDiscreteScheduler", prediction_type="v_prediction", timestep_spacing="trailing",
                              **SD_BETAS),
    "euler_linspace": saved("EulerDiscreteScheduler", **SD_BETAS),
    "euler_karras": saved("EulerDiscreteScheduler", use_karras_sigmas=True, timestep_spacing="leading",
                          steps_offset=1, **SD_BETAS),
    "euler_karras_range": saved("EulerDiscreteScheduler", use_karras_sigmas=True, sigma_min=0.1, sigma_max=10.0,
                                final_sigmas_type="sigma_min", **SD_BETAS),
    "euler_exponential": saved("EulerDiscreteScheduler", use_exponential_sigmas=True, **SD_BETAS),
    "euler_log_linear": saved("EulerDiscreteScheduler", interpolation_type="log_linear", **SD_BETAS),
    "euler_continuous_v": saved("EulerDiscreteScheduler", timestep_type="continuous",
                                prediction_type="v_prediction", **SD_BETAS),
    "euler_zero_snr": saved("EulerDiscreteScheduler", rescale_betas_zero_snr=True, prediction_type="v_prediction",
                            timestep_spacing="trailing", **SD_BETAS),
    "euler_sample_linear": saved("EulerDiscreteScheduler", prediction_type="sample", timestep_spacing="leading"),
    "euler_a_sd": saved("EulerAncestralDiscreteScheduler", timestep_spacing="leading", steps_offset=1, **SD_BETAS),
    "euler_a_v_trailing": saved("EulerAncestralDiscreteScheduler", prediction_type="v_prediction",
                                timestep_spacing="trailing", rescale_betas_zero_snr=True, **SD_BETAS),
    "ddim_clip": saved("DDIMScheduler"),
    "ddim_trailing_zero_snr": saved("DDIMScheduler", timestep_spacing="trailing", rescale_betas_zero_snr=True,
                                    prediction_type="v_prediction", clip_sample=False, **SD_BETAS),
    "ddim_linspace_sample": saved("DDIMScheduler", timestep_spacing="linspace", prediction_type="sample",
                                  clip_sample=True, clip_sample_range=1.5, **SD_BETAS),
    "ddim_cosine": saved("DDIMScheduler", beta_schedule="squaredcos_cap_v2", clip_sample=False),
    "dpm_sd": saved("DPMSolverMultistepScheduler", timestep_spacing="leading", steps_offset=1, **SD_BETAS),
    "dpm_karras": saved("DPMSolverMultistepScheduler", use_karras_sigmas=True, **SD_BETAS),
    "dpm_karras_cosine": saved("DPMSolverMultistepScheduler", use_karras_sigmas=True,
                               beta_schedule="squaredcos_cap_v2"),
    "dpm_lu_cosine": saved("DPMSolverMultistepScheduler", use_lu_lambdas=True, beta_schedule="squaredcos_cap_v2"),
    "dpm_order1": saved("DPMSolverMultistepScheduler", solver_order=1, **SD_BETAS),
    "dpm_order3": saved("DPMSolverMultistepScheduler", solver_order=3, lower_order_final=False,
                        final_sigmas_type="sigma_min", **SD_BETAS),
    "dpm_heun_sigma_min": saved("DPMSolverMultistepScheduler", solver_type="heun", final_sigmas_type="sigma_min",
                                **SD_BETAS),
    "dpm_euler_final": saved("DPMSolverMultistepScheduler", euler_at_final=True, final_sigmas_type="sigma_min",
                             lower_order_final=False, **SD_BETAS),
    "dpm_lu": saved("DPMSolverMultistepScheduler", use_lu_lambdas=True, **SD_BETAS),
    "dpm_exponential": saved("DPMSolverMultistepScheduler", use_exponential_sigmas=True, **SD_BETAS),
    "dpm_v_trailing": saved("DPMSolverMultistepScheduler", prediction_type="v_prediction",
                            timestep_spacing="trailing", rescale_betas_zero_snr=True, **SD_BETAS),
    "dpm_sample_clipped": saved("DPMSolverMultistepScheduler", prediction_type="sample", lambda_min_clipped=-5.1,
                                **SD_BETAS),
    "dpm_karras_hidden_bounds": saved("DPMSolverMultistepScheduler", extra={"sigma_min": 0.5, "sigma_max": 20.0},
                                      use_karras_sigmas=True, **SD_BETAS),
    "lms_exponential_hidden_max": saved("LMSDiscreteScheduler", extra={"sigma_min": None, "sigma_max": 9.0},
                                        use_exponential_sigmas=True, **SD_BETAS),
    "lms_karras_hidden_min": saved("LMSDiscreteScheduler", extra={"sigma_min": 0.3}, use_karras_sigmas=True,
                                   **SD_BETAS),
    "lms_sd": saved("LMSDiscreteScheduler", **SD_BETAS),
    "lms_karras": saved("LMSDiscreteScheduler", use_karras_sigmas=True, **SD_BETAS),
    "lms_leading_v": saved("LMSDiscreteScheduler", timestep_spacing="leading", steps_offset=1,
                           prediction_type="v_prediction", **SD_BETAS),
    "lms_exponential_sample": saved("LMSDiscreteScheduler", use_exponential_sigmas=True, prediction_type="sample",
                                    **SD_BETAS),
    "ddim_trained_betas": saved("DDIMScheduler", num_train_timesteps=100, clip_sample=False,
                                trained_betas=[float(b) for b in np.linspace(0.001, 0.05, 100)]),
}

# (case name, config, class override or None, steps)
CASES = [(f"sd15_pndm_{n}", "sd15_pndm", None, n) for n in (1, 2, 3, 20)]
CASES += [(f"sd15_pndm_to_{c}", "sd15_pndm", cls, 20) for c, cls in [
    ("euler", "EulerDiscreteScheduler"), ("euler_a", "EulerAncestralDiscreteScheduler"), ("ddim", "DDIMScheduler"),
    ("dpm", "DPMSolverMultistepScheduler"), ("lms", "LMSDiscreteScheduler")]]
CASES += [(f"sdxl_euler_{n}", "sdxl_euler", None, n) for n in (1, 2, 3, 20)]
CASES += [("sdxl_euler_to_euler_a_3", "sdxl_euler", "EulerAncestralDiscreteScheduler", 3),
          ("sdxl_euler_to_dpm_10", "sdxl_euler", "DPMSolverMultistepScheduler", 10)]
CASES += [(f"sd21_ddim_{n}", "sd21_ddim", None, n) for n in (1, 2, 3, 20)]
CASES += [("pndm_prk_4", "pndm_prk", None, 4), ("pndm_prk_10", "pndm_prk", None, 10),
          ("pndm_prk_v_trailing_7", "pndm_prk_v_trailing", None, 7), ("pndm_linspace_9", "pndm_linspace", None, 9)]
CASES += [(f"{c}_{n}", c, None, n) for c, n in [
    ("euler_v_trailing", 20), ("euler_v_trailing", 3), ("euler_linspace", 20), ("euler_karras", 25),
    ("euler_karras", 2), ("euler_karras_range", 12), ("euler_exponential", 15), ("euler_log_linear", 10),
    ("euler_continuous_v", 8), ("euler_zero_snr", 12), ("euler_sample_linear", 6),
    ("euler_a_sd", 1), ("euler_a_sd", 2), ("euler_a_sd", 3), ("euler_a_sd", 20), ("euler_a_v_trailing", 12),
    ("ddim_clip", 20), ("ddim_trailing_zero_snr", 12), ("ddim_linspace_sample", 9), ("ddim_cosine", 7),
    ("dpm_sd", 1), ("dpm_sd", 2), ("dpm_sd", 3), ("dpm_sd", 10), ("dpm_sd", 25), ("dpm_karras", 20),
    ("dpm_karras_cosine", 3), ("dpm_lu_cosine", 9), ("dpm_order1", 6), ("dpm_order3", 12), ("dpm_order3", 20),
    ("dpm_heun_sigma_min", 10), ("dpm_euler_final", 16), ("dpm_lu", 14), ("dpm_exponential", 11),
    ("dpm_v_trailing", 12), ("dpm_sample_clipped", 8),
    ("lms_sd", 1), ("lms_sd", 2), ("lms_sd", 3), ("lms_sd", 20), ("lms_karras", 20), ("lms_leading_v", 10),
    ("lms_exponential_sample", 7), ("ddim_trained_betas", 10), ("dpm_karras_hidden_bounds", 9),
    ("lms_exponential_hidden_max", 8), ("lms_karras_hidden_min", 8)]]
# Euler's config, its sigma_min and sigma_max kept for DPM-Solver (from_config's hidden config)
CASES += [("euler_karras_range_to_dpm_10", "euler_karras_range", "DPMSolverMultistepScheduler", 10)]


# FlowMatchEulerDiscreteScheduler, as the released pipelines ship it (black-forest-labs FLUX.1-dev
# and FLUX.1-schnell, stabilityai SD3-medium and SD3.5-large), and save_config-written variants.
FLUX_DEV = {"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.30.0.dev0",
            "base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096, "max_shift": 1.15,
            "num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": True}
FLUX_SCHNELL = dict(FLUX_DEV, shift=1.0, use_dynamic_shifting=False)
SD3 = {"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.29.0.dev0",
       "num_train_timesteps": 1000, "shift": 3.0}
SD35 = dict(SD3, _diffusers_version="0.31.0.dev0")
FLOW = "FlowMatchEulerDiscreteScheduler"
FLOW_CONFIGS = {
    "flux_dev": FLUX_DEV,
    "flux_schnell": FLUX_SCHNELL,
    "sd3": SD3,
    "sd35": SD35,
    "flux_dev_flow_sigmas": dict(FLUX_DEV, use_flow_sigmas=True),  # a hidden key FluxPipeline reads
    "flow_terminal": saved(FLOW, use_dynamic_shifting=True, base_shift=0.95, max_shift=2.05,
                           base_image_seq_len=1024, max_image_seq_len=4096, shift_terminal=0.1),
    "flow_karras": saved(FLOW, shift=3.0, use_karras_sigmas=True),
    "flow_exponential_hidden_bounds": saved(FLOW, extra={"sigma_min": 0.02, "sigma_max": 0.9},
                                            use_dynamic_shifting=True, use_exponential_sigmas=True),
    "flow_invert": saved(FLOW, invert_sigmas=True),
    "flow_linear": saved(FLOW, use_dynamic_shifting=True, time_shift_type="linear"),
    "flow_stochastic": saved(FLOW, shift=3.0, stochastic_sampling=True),
    "flow_odd": saved(FLOW, num_train_timesteps=100, shift=1.7),
}
CONFIGS.update(FLOW_CONFIGS)

# CogVideoX, as THUDM/CogVideoX-2b and -5b ship them (CogVideoXDDIMScheduler; the model cards
# switch to CogVideoXDPMScheduler.from_config), and save_config-written variants for the float32
# schedules (betas other than scaled_linear) and the other options.
COGVIDEOX_2B = {"_class_name": "CogVideoXDDIMScheduler", "_diffusers_version": "0.30.0.dev0", "beta_end": 0.012,
                "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
                "clip_sample_range": 1.0, "num_train_timesteps": 1000, "prediction_type": "v_prediction",
                "rescale_betas_zero_snr": True, "sample_max_value": 1.0, "set_alpha_to_one": True,
                "snr_shift_scale": 3.0, "steps_offset": 0, "timestep_spacing": "trailing", "trained_betas": None}
COGVIDEOX_5B = dict(COGVIDEOX_2B, _diffusers_version="0.31.0.dev0", snr_shift_scale=1.0)
COGX_DPM = "CogVideoXDPMScheduler"
CONFIGS.update({
    "cogvideox_2b": COGVIDEOX_2B,
    "cogvideox_5b": COGVIDEOX_5B,
    "cogx_ddim_linear_eps": saved("CogVideoXDDIMScheduler", beta_schedule="linear", beta_start=0.0001,
                                  beta_end=0.02, set_alpha_to_one=False, timestep_spacing="leading", steps_offset=1),
    "cogx_dpm_linear_zero_snr": saved(COGX_DPM, beta_schedule="linear", prediction_type="v_prediction",
                                      rescale_betas_zero_snr=True, timestep_spacing="trailing", snr_shift_scale=2.0),
    "cogx_dpm_eps_linspace": saved(COGX_DPM, timestep_spacing="linspace", set_alpha_to_one=False),
    "cogx_ddim_cosine_sample": saved("CogVideoXDDIMScheduler", beta_schedule="squaredcos_cap_v2",
                                     prediction_type="sample", snr_shift_scale=1.5),
})
# The float32 schedules (betas other than scaled_linear) with rescale_betas_zero_snr take torch's
# float32 sqrt, which on this machine (MKL, AVX-512) is not correctly rounded for ~20% of inputs:
# diffc's alphas_cumprod differ from diffusers' by an ulp here and there (the released float64
# schedules match bit for bit).  A step whose previous alpha is alphas_cumprod[0] (1 - it ~ 2e-3)
# turns that ulp into ~4e-5 of its coefficients, past the 1e-6 the tests hold: the float32
# zero-SNR case runs 12 steps, whose last step goes to final_alpha_cumprod instead (11 would not).
CASES += [(f"{c}_{n}", c, None, n) for c, n in [
    ("cogvideox_2b", 50), ("cogvideox_2b", 7), ("cogvideox_5b", 12), ("cogvideox_5b", 1),
    ("cogx_ddim_linear_eps", 10), ("cogx_ddim_cosine_sample", 9),
    ("cogx_dpm_linear_zero_snr", 12), ("cogx_dpm_eps_linspace", 8)]]
CASES += [(f"{c}_to_dpm_{n}", c, COGX_DPM, n) for c, n in [
    ("cogvideox_5b", 50), ("cogvideox_5b", 1), ("cogvideox_5b", 2), ("cogvideox_2b", 13), ("cogvideox_2b", 3)]]

# (config, pipeline, image_seq_len, steps): the case is named <config>_<pipeline>_<seq>_<steps>
FLOW_CASES = [
    ("flux_dev", "flux", 4096, 28), ("flux_dev", "flux", 1024, 4), ("flux_dev", "flux", 256, 1),
    ("flux_dev", "flux", 16, 3), ("flux_dev", "flux", 6000, 2),
    ("flux_schnell", "flux", 4096, 4), ("flux_schnell", "flux", 1024, 1),
    ("sd3", "sd3", 4096, 28), ("sd3", "sd3", 1024, 1), ("sd3", "sd3", 1024, 2),
    ("sd35", "sd3", 4096, 4), ("sd35", "sd3", 4096, 10),
    ("flux_dev_flow_sigmas", "flux", 1024, 5),
    ("flow_terminal", "flux", 2000, 8), ("flow_terminal", "sd3", 700, 6),
    ("flow_karras", "sd3", 1024, 7), ("flow_karras", "flux", 1024, 5),
    ("flow_exponential_hidden_bounds", "flux", 3000, 6),
    ("flow_invert", "sd3", 1024, 5),
    ("flow_linear", "flux", 2048, 8), ("flow_linear", "sd3", 100, 4),
    ("flow_stochastic", "sd3", 1024, 6),
    ("flow_odd", "sd3", 1024, 9), ("flow_odd", "flux", 1024, 3),
]


def flow_set_timesteps(sched, pipeline, image_seq_len, steps):
    """set_timesteps as FluxPipeline / StableDiffusion3Pipeline call it (retrieve_timesteps);
    returns the mu passed (None: none)."""
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift
    c = sched.config
    mu = None
    if pipeline == "flux" or c.get("use_dynamic_shifting", None):
        mu = calculate_shift(image_seq_len, c.get("base_image_seq_len", 256), c.get("max_image_seq_len", 4096),
                             c.get("base_shift", 0.5), c.get("max_shift", 1.15))
    if pipeline == "flux":
        sigmas = np.linspace(1.0, 1 / steps, steps)
        if hasattr(c, "use_flow_sigmas") and c.use_flow_sigmas:
            sigmas = None
        if sigmas is not None:
            sched.set_timesteps(sigmas=sigmas, mu=mu)
        else:
            sched.set_timesteps(steps, mu=mu)
    else:
        sched.set_timesteps(steps, **({"mu": mu} if mu is not None else {}))
    return mu


def write_config(out, name, spec):
    path = os.path.join(out, "configs", f"{name}.json")
    if isinstance(spec, dict):
        with open(path, "w") as f:
            json.dump(spec, f, indent=2, sort_keys=True)
            f.write("\n")
        return
    _, cls_name, kwargs, extra = spec
    with tempfile.TemporaryDirectory() as tmp:
        scheduler_class(cls_name)(**kwargs).save_config(tmp)
        with open(os.path.join(tmp, "scheduler_config.json")) as f:
            text = f.read()
    if extra:
        config = json.loads(text)
        config.update(extra)
        text = json.dumps(config, indent=2, sort_keys=True) + "\n"
    with open(path, "w") as f:
        f.write(text)


def load_config(out, name):
    with open(os.path.join(out, "configs", f"{name}.json")) as f:
        return json.load(f)  # Python's json reads -Infinity


# ---- one denoising loop ----------------------------------------------------------------------

def run_case(out, name, config_name, override, steps, seed, flow=None):
    """flow: (pipeline, image_seq_len) for a flow-matching case."""
    import inspect
    config = load_config(out, config_name)
    sched = scheduler_class(override or config["_class_name"]).from_config(config)
    table = torch.randn(SHAPE, generator=torch.Generator().manual_seed(1234 + seed))
    gen = torch.Generator().manual_seed(seed)
    mu = flow_set_timesteps(sched, flow[0], flow[1], steps) if flow else sched.set_timesteps(steps)
    timesteps = sched.timesteps
    coef = (0.05 + 0.004 * torch.arange(len(timesteps), dtype=torch.float64)).to(torch.float32)
    init_noise_sigma = getattr(sched, "init_noise_sigma", 1.0)
    latents = torch.randn(SHAPE, generator=gen, dtype=torch.float32) * init_noise_sigma
    accepted = set(inspect.signature(sched.step).parameters)
    extra = {k: v for k, v in (("eta", 0.0), ("generator", gen)) if k in accepted}
    tensors = {"timesteps": timesteps.to(torch.float32).numpy(),
               "init_noise_sigma": np.array([float(init_noise_sigma)], np.float32),
               "latents": latents.numpy().copy(), "table": table.numpy(), "coef": coef.numpy()}
    if flow:
        tensors["sigmas"] = sched.sigmas.to(torch.float32).numpy()
    scale = getattr(sched, "scale_model_input", lambda x, t: x)
    old_pred_original_sample = None
    for i, t in enumerate(timesteps):
        x = scale(latents, t)
        tensors[f"input.{i}"] = x.numpy().copy()
        output = x * float(coef[i]) + table
        if type(sched).__name__ == COGX_DPM:  # as CogVideoXPipeline calls it
            latents, old_pred_original_sample = sched.step(output, old_pred_original_sample, t,
                                                           timesteps[i - 1] if i > 0 else None, latents,
                                                           **extra, return_dict=False)
        else:
            latents = sched.step(output, t, latents, **extra).prev_sample
        tensors[f"sample.{i}"] = latents.numpy().copy()
    save_file({k: np.ascontiguousarray(v, dtype="<f4") for k, v in tensors.items()},
              os.path.join(out, f"{name}.safetensors"))
    case = {"name": name, "config": f"configs/{config_name}.json", "class_override": override, "steps": steps,
            "seed": seed, "loop_length": len(timesteps), "class": type(sched).__name__}
    if flow:
        case.update({"pipeline": flow[0], "image_seq_len": flow[1], "mu": mu})
    return case


# ---- CogVideoXPipeline's use_dynamic_cfg -------------------------------------------------------

DYNAMIC_CFG_EXPR = ("1 + guidance_scale * (\n"
                    "                        (1 - math.cos(math.pi * ((num_inference_steps - t.item()) / "
                    "num_inference_steps) ** 5.0)) / 2\n"
                    "                    )")


def make_dynamic_cfg(out):
    import math
    import inspect
    from diffusers import CogVideoXDDIMScheduler
    from diffusers.pipelines.cogvideo.pipeline_cogvideox import CogVideoXPipeline
    if DYNAMIC_CFG_EXPR not in inspect.getsource(CogVideoXPipeline.__call__):
        raise SystemExit("CogVideoXPipeline's use_dynamic_cfg expression changed: update make_dynamic_cfg")
    values = []
    for guidance_scale, num_inference_steps in [(6.0, 50), (6.0, 7), (3.5, 12), (1.0, 1)]:
        sched = CogVideoXDDIMScheduler.from_config(COGVIDEOX_2B)
        sched.set_timesteps(num_inference_steps)
        for t in sched.timesteps:
            scale = eval(DYNAMIC_CFG_EXPR, {"math": math}, {"guidance_scale": guidance_scale, "t": t,
                                                             "num_inference_steps": num_inference_steps})
            values.append({"guidance_scale": guidance_scale, "num_inference_steps": num_inference_steps,
                           "timestep": int(t), "scale": scale})
    with open(os.path.join(out, "cogvideox_dynamic_cfg.json"), "w") as f:
        json.dump({"description": "CogVideoXPipeline(use_dynamic_cfg=True)'s guidance scale at each timestep "
                   "(tools/make_fixtures_scheduler.py)", "values": values}, f, indent=1)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/schedulers")
    args = ap.parse_args()
    torch.set_num_threads(1)
    import diffusers
    print(f"diffusers {diffusers.__version__}, torch {torch.__version__}, numpy {np.__version__}")
    os.makedirs(os.path.join(args.out, "configs"), exist_ok=True)
    make_rng(args.out)
    make_dynamic_cfg(args.out)
    for name, spec in CONFIGS.items():
        write_config(args.out, name, spec)
    cases = [run_case(args.out, name, cfg, override, steps, 100 + k)
             for k, (name, cfg, override, steps) in enumerate(CASES)]
    cases += [run_case(args.out, f"{cfg}_{pipe}_{seq}_{steps}", cfg, None, steps, 500 + k, (pipe, seq))
              for k, (cfg, pipe, seq, steps) in enumerate(FLOW_CASES)]
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump({"description": "one denoising loop per case (tools/make_fixtures_scheduler.py); shape "
                   + "x".join(map(str, SHAPE)), "shape": list(SHAPE), "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases, {len(CONFIGS)} configs")


if __name__ == "__main__":
    main()
