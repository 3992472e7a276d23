"""The private names of paddle's DataLoader that dynbatch's collators read
(NOTE [ a collator safe by construction ] in :mod:`dynbatch.paddle.safe_collate`) still exist
in the installed paddle and still call a collate_fn: a paddle that renamed one would quietly
bring back the hang of a plain loop, so it fails here, by name, instead."""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import paddle

from dynbatch.paddle import safe_collate


def functions_named(module: object, name: str) -> list:
    """The functions called ``name`` in ``module``: its own, and its classes' methods."""
    found = [vars(module).get(name)]
    found += [vars(c).get(name) for c in vars(module).values() if inspect.isclass(c)]
    return [f for f in found if inspect.isfunction(f) and f.__module__ == module.__name__]


def test_each_loader_frame_read_is_a_function_of_paddle_that_fetches_batches() -> None:
    for module_name, name in sorted(safe_collate._LOADER_FRAMES):
        module = importlib.import_module(module_name)
        found = functions_named(module, name)
        assert found, (
            f"paddle {paddle.__version__} has no {module_name}.{name}: update _LOADER_FRAMES"
        )
        assert any(".fetch(" in inspect.getsource(f) for f in found), (
            f"paddle {paddle.__version__}'s {module_name}.{name} no longer fetches batches"
        )


def test_the_fetcher_module_read_is_where_paddle_calls_the_collate_fn() -> None:
    module = importlib.import_module(safe_collate._FETCHER)
    fetchers = [c for c in vars(module).values() if inspect.isclass(c)]
    assert any("self.collate_fn(" in inspect.getsource(c) for c in fetchers), (
        f"paddle {paddle.__version__}'s {safe_collate._FETCHER} no longer calls collate_fn: "
        "update _FETCHER"
    )


def test_a_collate_fn_called_by_a_plain_loader_sees_the_loader_as_its_caller() -> None:
    seen = []

    def collate(samples: list) -> dict:
        caller = safe_collate.sys._getframe(1).f_globals.get("__name__")
        seen.append((caller, safe_collate.called_by_the_loader()))
        return {"x": np.stack(samples)}

    data = [np.arange(3, dtype="int64")] * 4
    for _ in paddle.io.DataLoader(data, batch_size=2, collate_fn=collate, num_workers=0):
        pass
    assert seen == [(safe_collate._FETCHER, True)] * 2, seen
    assert not safe_collate.called_by_the_loader(), "a caller outside the loader"
