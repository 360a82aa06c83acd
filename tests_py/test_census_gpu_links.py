"""How the census links a device kernel to the code that launched it, on
events shaped like torch.profiler's FunctionEvents on a GPU (the H200 showed
each path: aten kernels linked through the frontend op's correlation id,
driver-API launches linked only through the runtime call or not at all,
profiler ranges mirrored on the GPU timeline). The events are built here
because a CPU has no CUPTI; the attribution code is the real one."""

from types import SimpleNamespace

from kernelsmith.evaluator.census import KERNEL_RANGE, CallCensus, Census


def ev(id, name, device="CPU", linked=0, parent=None, start=0.0, end=1.0, annotation=False):
    e = SimpleNamespace(
        id=id,
        name=name,
        device_type=f"DeviceType.{device}",
        linked_correlation_id=linked,
        cpu_parent=parent,
        cpu_children=[],
        time_range=SimpleNamespace(start=start, end=end),
        device_resource_id=7,
        is_user_annotation=annotation,
    )
    if parent is not None:
        parent.cpu_children.append(e)
    return e


def attribute(events, launched=None):
    from kernelsmith.evaluator.guards import DEFAULT_ALLOWED_OPS

    census = Census(set(DEFAULT_ALLOWED_OPS), cuda=True, host_memory=False)
    record = CallCensus(device_level=True)
    census._attribute(events, record, launched or {})
    return record


def test_every_link_path():
    fill = ev(5, "aten::fill_")  # frontend op, external id 5
    rng = ev(6, KERNEL_RANGE + "relu_kernel")  # the program's launch range, external id 6
    launch = ev(5, "cuLaunchKernelEx", linked=6, parent=rng)  # CUPTI id 5 collides with the fill's id
    events = [
        fill,
        rng,
        launch,
        ev(900, "void at::native::vectorized_elementwise_kernel<FillFunctor>", "CUDA", linked=5),
        ev(5, "relu_kernel", "CUDA", linked=0),  # linked only through the runtime call with CUPTI id 5
        ev(901, KERNEL_RANGE + "relu_kernel", "CUDA", annotation=True),  # the range, mirrored: not a kernel
    ]
    record = attribute(events)
    assert record.own == {"relu_kernel": 1.0}, record
    assert "aten::fill_" in record.housekeeping and not record.foreign, record


def test_unlinked_kernels_by_name_up_to_the_launch_count():
    events = [ev(1, "mm_kernel", "CUDA"), ev(2, "mm_kernel", "CUDA"), ev(3, "cupy_maximum", "CUDA")]
    record = attribute(events, {"mm_kernel": 1})
    assert record.own == {"mm_kernel": 1.0}
    foreign = " ".join(record.foreign)
    assert "mm_kernel" in foreign and "cupy_maximum" in foreign, record.foreign  # one launch, two kernels


def test_a_foreign_op_kernel_is_named_with_its_op():
    relu = ev(8, "aten::relu")
    record = attribute([relu, ev(50, "void at::native::relu_kernel", "CUDA", linked=8)])
    assert any("(from aten::relu)" in k for k in record.foreign), record.foreign
    assert not record.own


def test_unlinked_housekeeping_kernels_of_ops_that_ran():
    """On the H200 torch.zeros_like's fill kernel and the autotuner's L2
    clear came with no link to their op: they are housekeeping when as many
    allowed fill ops ran in the call; a fill kernel beyond that, or a copy
    kernel without a copy op, is foreign."""
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
    events = [ev(5, "aten::zeros_like"), ev(6, "aten::fill_"), ev(1, fill, "CUDA"), ev(2, "relu_kernel", "CUDA")]
    record = attribute(events, {"relu_kernel": 1})
    assert record.own == {"relu_kernel": 1.0} and record.housekeeping.get("FillFunctor") == 1.0, record
    assert not record.foreign, record.foreign
    events += [ev(3, fill, "CUDA"), ev(4, "void at::native::direct_copy_kernel_cuda", "CUDA")]
    record = attribute(events, {"relu_kernel": 1})
    foreign = " ".join(record.foreign)
    assert "FillFunctor" in foreign and "direct_copy_kernel" in foreign, record.foreign


def test_extension_kernels_by_declared_name_up_to_the_counted_launches():
    """On the H100 a CUDA extension's <<<>>> launch came with no link to the
    ``ks::kernel`` range around the extension call, and the kernel's name
    (``relu_vec4_kernel(float4 const*, ...)``) is not the function's
    (``relu_cuda``): the call's counted launches are a budget for kernels
    whose name the candidate's source declares; one kernel more, or a
    library kernel, stays foreign."""
    from kernelsmith.backends.base import _Census
    from kernelsmith.evaluator.census import _DECLARED

    saved = set(_Census.kernel_names)
    _Census.kernel_names.clear()
    _Census.kernel_names.update({"relu_vec4_kernel"})
    try:
        k = "relu_vec4_kernel(float4 const*, float4*, long)"
        record = attribute([ev(1, k, "CUDA")], {_DECLARED: 1})
        assert record.own == {k: 1.0} and not record.foreign, record
        record = attribute([ev(1, k, "CUDA"), ev(2, k, "CUDA"), ev(3, "sgemm_128x64_nn", "CUDA")], {_DECLARED: 2})
        assert record.own == {k: 2.0}, record
        assert any("sgemm_128x64_nn" in f for f in record.foreign), record.foreign
        record = attribute([ev(1, k, "CUDA"), ev(2, k, "CUDA")], {_DECLARED: 1})
        assert record.own == {k: 1.0} and any("relu_vec4_kernel" in f for f in record.foreign), record
    finally:
        _Census.kernel_names.clear()
        _Census.kernel_names.update(saved)


def test_kernel_range_markers_are_not_the_programs_torch_ops():
    """Entering and leaving the ``ks::kernel`` range runs profiler ops
    (aten::_record_function_enter_new/_exit); on the H100 every CUDA
    candidate was judged hacked for them, since an extension call runs
    outside ``backend_internal``. The op guard must not see them, but it
    must still see a torch op the call itself runs."""
    import torch

    from kernelsmith.backends.base import _Census, census_launch
    from kernelsmith.evaluator.guards import TorchOpGuard

    x = torch.ones(4)
    was = _Census.active
    _Census.active, _Census.launches = True, []
    try:
        with TorchOpGuard() as guard:
            with census_launch("relu_cuda", [x]) as entry:
                entry["device_kernels"] = 1
        assert not any("record_function" in op for op in guard.seen), guard.seen
        with TorchOpGuard() as guard:
            with census_launch("relu_cuda", [x]):
                torch.relu(x)
        assert "relu" in guard.seen, guard.seen
        assert _Census.launches[0]["device_kernels"] == 1
    finally:
        _Census.active, _Census.launches = was, []
