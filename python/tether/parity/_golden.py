"""Golden bundles: reference inputs and outputs saved with metadata, so every later stage
(quantization, another engine, another machine) is checked against the same evidence.

A bundle is a directory: ``golden.json`` (format name and version, metadata, and per sample the
name, dtype and shape of each input and output) and ``sample_{k}.npz`` with keys ``in/<name>``
and ``out/<name>``. The ONNX backend-test layout (``test_data_set_{k}/input_{i}.pb``) is written
and read too, so the same evidence reaches any runtime that runs the onnx node tests.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from tether._native import core as _core
from tether._regular_file import open_regular
from tether.parity._inputs import native_byte_order
from tether.parity._types import InputSpec

_FORMAT = "tether.golden"
_VERSION = 1
_INDEX = "golden.json"

_Arrays = dict[str, np.ndarray]
_Sample = tuple[_Arrays, _Arrays]


class GoldenError(ValueError):
    """A golden bundle or ONNX test directory is malformed, or cannot be written or matched as asked.

    Example:
        >>> load_golden("no/such/bundle")  # doctest: +SKIP
        Traceback (most recent call last):
        tether.parity._golden.GoldenError: no/such/bundle: no golden bundle directory here
    """


@dataclass
class GoldenBundle:
    """Reference samples (inputs, outputs) and free-form JSON-able metadata.

    Metadata usually holds ``model_sha256``, ``producer`` (``"torch 2.13.0"``), ``tolerance``
    (a profile name or ``{"atol", "rtol", "rule"}``), ``created`` and ``tether_version``.

    Example:
        >>> b = GoldenBundle([({"x": np.ones(2, np.float32)}, {"y": np.full(2, 2, np.float32)})])
        >>> b.samples[0][1]["y"].tolist()
        [2.0, 2.0]
    """

    samples: list[_Sample]
    metadata: dict[str, Any] = field(default_factory=dict)


def _checked(arrays: dict[str, Any], where: str) -> _Arrays:
    # Native byte order on disk and in memory: stored inputs then match feeds bit for bit.
    out = {name: native_byte_order(value) for name, value in arrays.items()}
    for name, arr in out.items():
        if not isinstance(name, str) or not name:
            raise GoldenError(f"{where}: tensor names must be non-empty strings, got {name!r}")
        if arr.dtype.hasobject:
            raise GoldenError(f"{where}: '{name}' has dtype {arr.dtype}; object arrays cannot be saved without pickle")
    return out


def _describe(arrays: _Arrays) -> list[dict[str, Any]]:
    return [{"name": n, "dtype": a.dtype.name, "shape": list(a.shape)} for n, a in arrays.items()]


def _is_bundle(path: Path) -> bool:
    try:
        with open_regular(path / _INDEX, what="golden bundle index", error=GoldenError) as f:
            return json.loads(f.read().decode("utf-8")).get("format") == _FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def save_golden(
    path: str | os.PathLike[str], samples: list[_Sample], metadata: dict[str, Any] | None = None,
    *, overwrite: bool = False,
) -> Path:
    """Write ``samples`` (a list of (inputs, outputs) dicts) and ``metadata`` as a bundle directory.

    ``created`` (UTC ISO time) and ``tether_version`` are filled in unless ``metadata`` sets them.
    The bundle is written into a temporary sibling directory and renamed into place, so a crash
    never leaves a directory at ``path`` that loads as valid. An existing empty directory is
    replaced; an existing bundle only with ``overwrite=True``; anything else never.

    Raises:
        FileExistsError: ``path`` holds something that may not be replaced.
        GoldenError: no samples, an object array, a bad name, or metadata that is not JSON-able.

    Example:
        >>> x = {"x": np.arange(3, dtype=np.float32)}
        >>> save_golden("golden/", [(x, {"y": x["x"] * 2})], {"producer": "torch 2.13.0"})  # doctest: +SKIP
        PosixPath('golden')
    """
    path = Path(path)
    if not samples:
        raise GoldenError(f"{path}: a golden bundle needs at least one sample")
    checked = [
        (_checked(i, f"sample {k} inputs"), _checked(o, f"sample {k} outputs"))
        for k, (i, o) in enumerate(samples)
    ]
    meta: dict[str, Any] = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        meta["tether_version"] = importlib.metadata.version("tether")
    samples_doc = [{"inputs": _describe(i), "outputs": _describe(o)} for i, o in checked]
    doc = {"format": _FORMAT, "version": _VERSION, "metadata": meta | (metadata or {}), "samples": samples_doc}
    try:
        text = json.dumps(doc, indent=1, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise GoldenError(f"{path}: metadata must be JSON-able: {e}") from e
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{path}: exists and is not a directory; refusing to replace it")
    if path.is_dir() and any(path.iterdir()) and not _is_bundle(path):
        raise FileExistsError(f"{path}: exists and is not a golden bundle; refusing to replace it")
    if _is_bundle(path) and not overwrite:
        raise FileExistsError(f"{path}: a golden bundle is already here; pass overwrite=True to replace it")

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        for k, (inputs, outputs) in enumerate(checked):
            with open(tmp / f"sample_{k}.npz", "wb") as f:
                arrays = {f"in/{n}": a for n, a in inputs.items()} | {f"out/{n}": a for n, a in outputs.items()}
                np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy stubs mis-type savez keywords
        # The index goes last: a directory without it never loads.
        (tmp / _INDEX).write_text(text, encoding="utf-8")
        if path.exists():
            old = path.parent / f".{path.name}.old-{uuid.uuid4().hex}"
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _read_index(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    index = path / _INDEX
    if not path.is_dir():
        raise GoldenError(f"{path}: no golden bundle directory here")
    if not index.exists():
        raise GoldenError(f"{index}: missing; expected the bundle index written by save_golden")
    try:
        with open_regular(index, what="golden bundle index", error=GoldenError) as f:
            doc = json.loads(f.read().decode("utf-8"))
    except GoldenError:
        raise
    except (OSError, ValueError) as e:
        raise GoldenError(f"{index}: not readable JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise GoldenError(f"{index}: format is {found!r}, expected {_FORMAT!r}")
    if doc.get("version") != _VERSION:
        raise GoldenError(f"{index}: format version is {doc.get('version')!r}, expected {_VERSION}")
    samples = doc.get("samples")
    if not isinstance(samples, list) or not samples or not isinstance(doc.get("metadata"), dict):
        raise GoldenError(f"{index}: expected a non-empty 'samples' list and a 'metadata' object")
    return doc["metadata"], samples


def _load_sample(file: Path, entry: dict[str, Any]) -> _Sample:
    try:  # npz key -> (0 for inputs or 1 for outputs, name, "dtype[shape]" as the index states it)
        wanted = {f"{side}/{t['name']}": (int(side == "out"), t["name"], f"{t['dtype']}{list(t['shape'])}")
                  for side, key in (("in", "inputs"), ("out", "outputs")) for t in entry[key]}
    except (KeyError, TypeError) as e:
        raise GoldenError(f"{file}: its entry in {_INDEX} is malformed: {e!r}") from e
    if not file.exists():
        raise GoldenError(f"{file}: missing; {_INDEX} lists {len(wanted)} tensors in it")
    with open_regular(file, what="golden sample file", error=GoldenError) as f:
        if not zipfile.is_zipfile(f):
            raise GoldenError(f"{file}: not an npz (zip) file")
        f.seek(0)
        return _read_sample(f, file, wanted)


def _read_sample(f: BinaryIO, file: Path, wanted: dict[str, tuple[int, str, str]]) -> _Sample:
    sample: _Sample = ({}, {})
    key = ""
    try:
        with np.load(f, allow_pickle=False) as z:
            if set(z.files) != set(wanted):
                raise GoldenError(f"{file}: holds {sorted(z.files)}, expected {sorted(wanted)} as listed in {_INDEX}")
            for key, (side, name, stated) in wanted.items():
                a = native_byte_order(z[key])  # a bundle written elsewhere may hold '>f4'
                if (found := f"{a.dtype.name}{list(a.shape)}") != stated:
                    raise GoldenError(f"{file}: '{key}' is {found}, expected {stated} as listed in {_INDEX}")
                sample[side][name] = a
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        if isinstance(e, GoldenError):
            raise
        raise GoldenError(f"{file}: not a readable npz of plain arrays at '{key}': {e}") from e
    return sample


def load_golden(path: str | os.PathLike[str]) -> GoldenBundle:
    """Read and validate a bundle written by :func:`save_golden`.

    Raises:
        GoldenError: the directory, index or a sample file is missing or is not a regular file (a
            FIFO or device is refused before any read); the format name or version
            is wrong; a sample's names, dtypes or shapes disagree with the index; an array needs pickle.

    Example:
        >>> bundle = load_golden("golden/")  # doctest: +SKIP
        >>> bundle.metadata["producer"], len(bundle.samples)  # doctest: +SKIP
        ('torch 2.13.0', 1)
    """
    path = Path(path)
    metadata, entries = _read_index(path)
    return GoldenBundle([_load_sample(path / f"sample_{k}.npz", e) for k, e in enumerate(entries)], metadata)


def model_sha256(model: str | os.PathLike[str] | bytes) -> str:
    """SHA-256 hex digest of an ONNX model's bytes, including its external data.

    For a path, the digest covers the model file followed by every regular file in the same
    directory whose name starts with the model's file name plus ``"."`` (``model.onnx.data``,
    the convention torch and tether use for external data), in sorted name order. External data
    named otherwise is not covered. Bytes are hashed as given.

    Example:
        >>> model_sha256(b"")
        'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
    """
    if isinstance(model, bytes):
        return hashlib.sha256(model).hexdigest()
    h = hashlib.sha256()
    path = Path(model)
    extras = sorted(p for p in path.parent.iterdir() if p.name.startswith(path.name + ".") and p.is_file())
    for p in [path, *extras]:
        with open_regular(p, what="model file", error=_core.ModelError) as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def write_onnx_test_dir(
    directory: str | os.PathLike[str], samples: list[_Sample],
    input_names: list[str] | None = None, output_names: list[str] | None = None,
) -> Path:
    """Write samples in the ONNX backend-test layout: ``test_data_set_{k}/input_{i}.pb`` and
    ``output_{i}.pb``, each a TensorProto named after its tensor.

    Files are numbered in ``input_names``/``output_names`` order (pass the model's graph order),
    else in each dict's order. ``directory`` may already hold the model, but no data sets.

    Raises:
        FileExistsError: ``directory`` already holds a ``test_data_set_*``.
        GoldenError: a sample's names differ from ``input_names``/``output_names``.

    Example:
        >>> write_onnx_test_dir("test_add/", [({"x": x, "y": y}, {"sum": x + y})], ["x", "y"])  # doctest: +SKIP
        PosixPath('test_add')
    """
    from onnx import numpy_helper

    directory = Path(directory)
    if directory.is_dir() and any(directory.glob("test_data_set_*")):
        raise FileExistsError(f"{directory}: already holds test_data_set_* directories; refusing to mix data sets")
    for k, (inputs, outputs) in enumerate(samples):
        data_set = directory / f"test_data_set_{k}"
        data_set.mkdir(parents=True)
        for prefix, arrays, names in (("input", inputs, input_names), ("output", outputs, output_names)):
            if names is not None and (set(names) != set(arrays) or len(names) != len(arrays)):
                raise GoldenError(f"sample {k} {prefix}s: has {sorted(arrays)}, expected exactly {names}")
            for i, name in enumerate(list(arrays) if names is None else names):
                tensor = numpy_helper.from_array(native_byte_order(arrays[name]), name)
                (data_set / f"{prefix}_{i}.pb").write_bytes(tensor.SerializeToString())
    return directory


def _numbered(directory: Path, pattern: str, what: str) -> list[Path]:
    found = {int(m.group(1)): p for p in directory.iterdir() if (m := re.fullmatch(pattern, p.name))}
    if sorted(found) != list(range(len(found))):
        raise GoldenError(f"{directory}: {what} numbered {sorted(found)}, expected 0..{len(found) - 1} without gaps")
    return [found[k] for k in range(len(found))]


def _read_tensors(data_set: Path, prefix: str) -> _Arrays:
    import onnx
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
    from onnx import numpy_helper

    arrays: _Arrays = {}
    for i, file in enumerate(_numbered(data_set, rf"{prefix}_(\d+)\.pb", f"{prefix} files")):
        tensor = onnx.TensorProto()
        try:
            with open_regular(file, what="ONNX test data file", error=GoldenError) as f:
                tensor.ParseFromString(f.read())
            arr = numpy_helper.to_array(tensor)
        except (DecodeError, ValueError, TypeError) as e:
            raise GoldenError(f"{file}: not a readable TensorProto: {e}") from e
        name = tensor.name or f"{prefix}_{i}"
        if name in arrays:
            raise GoldenError(f"{file}: tensor name {name!r} repeats an earlier {prefix} of {data_set}")
        arrays[name] = arr
    return arrays


def read_onnx_test_dir(directory: str | os.PathLike[str]) -> list[_Sample]:
    """Read ``test_data_set_{k}`` directories back as (inputs, outputs) samples, ordered by ``k``.

    Names come from the TensorProtos; an unnamed tensor is ``input_{i}``/``output_{i}``.

    Raises:
        GoldenError: no data sets, a gap in the numbering of data sets or files, a file that is not
            a TensorProto, or a name used twice.

    Example:
        >>> inputs, outputs = read_onnx_test_dir("onnx/backend/test/data/node/test_add")[0]  # doctest: +SKIP
        >>> list(inputs), list(outputs)  # doctest: +SKIP
        (['x', 'y'], ['sum'])
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise GoldenError(f"{directory}: no such directory")
    data_sets = _numbered(directory, r"test_data_set_(\d+)", "data sets")
    if not data_sets:
        raise GoldenError(f"{directory}: no test_data_set_* directories")
    return [(_read_tensors(d, "input"), _read_tensors(d, "output")) for d in data_sets]


def _difference(name: str, want: np.ndarray | None, got: np.ndarray | None) -> str | None:
    """How feed ``got`` differs from stored ``want``, or None when they are bitwise equal."""
    if want is None or got is None:
        return f"input '{name}' is " + ("not stored" if want is None else "missing from the feeds")
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"input '{name}' is {got.dtype}{list(got.shape)}, stored {want.dtype}{list(want.shape)}"
    if got.tobytes() == want.tobytes():
        return None
    try:
        if np.array_equal(got, want, equal_nan=True):
            return f"input '{name}' is equal in value but not bitwise (signed zero or NaN payload)"
        kind = np.complex128 if got.dtype.kind == "c" else np.float64
        with np.errstate(all="ignore"):
            diff = np.nanmax(np.abs(got.astype(kind) - want.astype(kind)))
        return f"input '{name}' differs: max abs difference {diff:.6g}"
    except (TypeError, ValueError):
        return f"input '{name}' differs in value"


class GoldenRunner:
    """A Runner that answers from a golden bundle: stored inputs give their stored outputs.

    Use it as the reference side of a comparison, iterating over exactly the stored inputs.

    Example:
        >>> x = {"x": np.arange(3, dtype=np.float32)}
        >>> runner = GoldenRunner(GoldenBundle([(x, {"y": x["x"] * 2})]))
        >>> runner.run(runner.samples()[0])["y"].tolist()
        [0.0, 2.0, 4.0]
        >>> [(s.name, s.shape) for s in runner.input_specs()]
        [('x', (3,))]
    """

    def __init__(self, bundle_or_path: GoldenBundle | str | os.PathLike[str], name: str = "golden") -> None:
        self.name = name
        #: The bundle's folder, when it was loaded from one.
        self.path = "" if isinstance(bundle_or_path, GoldenBundle) else os.fspath(bundle_or_path)
        self.bundle = bundle_or_path if isinstance(bundle_or_path, GoldenBundle) else load_golden(bundle_or_path)

    def input_specs(self) -> list[InputSpec]:
        """Name, dtype and concrete shape of each input of the first sample (empty without samples)."""
        first = self.bundle.samples[0][0] if self.bundle.samples else {}
        return [InputSpec(n, a.dtype, tuple(a.shape)) for n, a in first.items()]

    def output_names(self) -> list[str]:
        """The outputs of the first sample, in stored order (a torch module compared with the
        bundle takes these names in order).

        Example:
            >>> GoldenRunner(GoldenBundle([({"x": np.ones(1)}, {"logits": np.ones(1)})])).output_names()
            ['logits']
        """
        return list(self.bundle.samples[0][1]) if self.bundle.samples else []

    def samples(self) -> list[_Arrays]:
        """Copies of the stored input dicts, in bundle order."""
        return [{n: a.copy() for n, a in inputs.items()} for inputs, _ in self.bundle.samples]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Copies of the outputs of the sample whose inputs are bitwise equal to ``feeds``.

        Raises:
            GoldenError: no sample matches; the message names the differing input of the closest one.
        """
        feeds = {n: native_byte_order(a) for n, a in feeds.items()}
        best: tuple[int, int, str] | None = None  # (number of differing inputs, sample, first difference)
        for k, (inputs, outputs) in enumerate(self.bundle.samples):
            names = [*inputs, *(n for n in feeds if n not in inputs)]
            diffs = [d for n in names if (d := _difference(n, inputs.get(n), feeds.get(n)))]
            if not diffs:
                return {n: a.copy() for n, a in outputs.items()}
            if best is None or len(diffs) < best[0]:
                best = (len(diffs), k, diffs[0])
        where = f"closest is sample {best[1]}, where {best[2]}" if best else "the bundle holds no samples"
        raise GoldenError(f"runner '{self.name}': no stored sample has these inputs; {where}")
