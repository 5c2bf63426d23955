"""The vector index of one palace: hnswlib over unit vectors, a cache of SQLite.

SQLite holds every drawer's vector, so this index is never the truth: it can be thrown
away and rebuilt at any time, and a snapshot on disk only saves the rebuild. Labels are the
SQLite rowids of the drawers; the store allocates them with ``AUTOINCREMENT`` so a label is
never reused, which keeps replaying the change log idempotent (see ``add``).

Vectors are unit length and the space is inner product, so similarity = ``1 - distance``
= cosine.

Filtering happens inside the search, never after truncation. Two strategies, chosen by the
size of the allowed set (measured on 10k x 384-d random unit vectors, 2 cores):

===============  ====================  ====================================
allowed labels   hnswlib ``filter=``   exact scan (vectors read from SQLite)
===============  ====================  ====================================
10               ~8.5 ms               ~0.03 ms
100              ~7.7 ms               ~0.13 ms
1,000            ~2.7 ms               ~2.4 ms
3,000            ~0.8 ms               ~8 ms
===============  ====================  ====================================

A filtered HNSW search walks most of the graph when few labels pass, while an exact scan
costs one SQLite row per allowed label: so small sets are scanned exactly (``exact_max``,
default 1,000) and large ones use ``filter=``. hnswlib's own ``get_items`` is far too slow
for the scan (~16 us per vector), which is why the store supplies a ``vector_source``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import hnswlib
import numpy as np

from trusty_memory.common.logs import get_logger

log = get_logger(__name__)

# Given labels, return (the labels that exist, their vectors as a float32 matrix, same order).
VectorSource = Callable[[Sequence[int]], tuple[list[int], np.ndarray]]

SNAPSHOT_FORMAT = 1
_META_RE = re.compile(r"^index-(\d+)\.json$")
# Batches smaller than this are added on one thread: thread start-up costs more than it saves.
_PARALLEL_ADD_MIN = 64


def _snapshot_paths(directory: Path, seq: int) -> tuple[Path, Path]:
    stem = f"index-{seq:012d}"
    return directory / f"{stem}.hnsw", directory / f"{stem}.json"


def _file_crc32(path: Path) -> int:
    crc = 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def top_k_exact(
    labels: Sequence[int], matrix: np.ndarray, query: np.ndarray, k: int
) -> list[tuple[int, float]]:
    """Exact cosine top-k over a small candidate matrix (rows are unit vectors)."""
    if not len(labels) or k <= 0:
        return []
    scores = matrix @ query.reshape(-1)
    k = min(k, len(labels))
    top = np.argpartition(-scores, k - 1)[:k] if k < len(labels) else np.arange(len(labels))
    top = top[np.argsort(-scores[top], kind="stable")]
    return [(int(labels[i]), min(1.0, float(scores[i]))) for i in top]


class VectorIndex:
    """An hnswlib index that knows which of its labels are live.

    hnswlib keeps deleted labels in its count and cannot list them cheaply, so the set of
    live labels is kept here (and the deleted ones are written next to each snapshot).
    """

    def __init__(
        self,
        dim: int,
        *,
        m: int = 16,
        ef_construction: int = 200,
        ef_search: int = 64,
        capacity: int = 1024,
        threads: int | None = None,
        exact_max: int = 1000,
        vector_source: VectorSource | None = None,
        _index: hnswlib.Index | None = None,
    ) -> None:
        self.dim = dim
        self.ef_search = ef_search
        self.exact_max = exact_max
        self.vector_source = vector_source
        self.threads = threads or min(2, os.cpu_count() or 1)
        if _index is None:
            _index = hnswlib.Index(space="ip", dim=dim)
            _index.init_index(
                max_elements=max(1, capacity),
                ef_construction=ef_construction,
                M=m,
                allow_replace_deleted=True,
            )
        self._index = _index
        self._index.set_ef(ef_search)
        self._ef = ef_search
        self._live: set[int] = set()
        # Labels marked deleted that may still sit in hnswlib's label table (a slot can be
        # reclaimed by a later add, which silently drops the old label from the table).
        self._dead: set[int] = set()

    # -- state ---------------------------------------------------------------------

    @property
    def live_count(self) -> int:
        return len(self._live)

    @property
    def capacity(self) -> int:
        return self._index.get_max_elements()

    def labels(self) -> set[int]:
        """A copy of the live labels."""
        return set(self._live)

    def __contains__(self, label: int) -> bool:
        return label in self._live

    # -- writes --------------------------------------------------------------------

    def add(self, labels: Iterable[int], vectors: np.ndarray) -> int:
        """Add vectors under ``labels``; labels already live are skipped (idempotent replay).

        Returns how many were added. A label that was deleted and comes back is revived in
        its old slot rather than added again, because with ``allow_replace_deleted`` an
        add of a label hnswlib still holds would leave two slots claiming it.
        """
        labels = [int(x) for x in labels]
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(labels), self.dim)
        fresh: dict[int, int] = {}  # label -> row; the last row wins within a batch
        revived: dict[int, int] = {}
        for row, label in enumerate(labels):
            if label in self._live:
                continue
            if label in self._dead:
                self._dead.discard(label)
                try:
                    self._index.unmark_deleted(label)
                    revived[label] = row
                    continue
                except RuntimeError:
                    pass  # its slot was reclaimed: it is a fresh label again
            fresh[label] = row
        if revived:
            rows = list(revived.values())
            # The label is live again, so this is an in-place update of its vector.
            self._index.add_items(vectors[rows], list(revived), num_threads=1)
        if fresh:
            self._reserve(len(fresh))
            rows = list(fresh.values())
            threads = self.threads if len(rows) >= _PARALLEL_ADD_MIN else 1
            self._index.add_items(
                vectors[rows], list(fresh), num_threads=threads, replace_deleted=True
            )
        self._live.update(fresh)
        self._live.update(revived)
        return len(fresh) + len(revived)

    def delete(self, label: int) -> bool:
        """Hide ``label`` from searches; a missing or already deleted label is a no-op."""
        label = int(label)
        if label not in self._live:
            return False
        try:
            self._index.mark_deleted(label)
        except RuntimeError:
            pass  # not in hnswlib's table: nothing to hide
        self._live.discard(label)
        self._dead.add(label)
        return True

    def _reserve(self, n: int) -> None:
        """Grow before an add would overflow (hnswlib raises on a full index)."""
        # Deleted slots are reused first, so element_count + n over-estimates the need.
        need = self._index.element_count + n
        cap = self._index.get_max_elements()
        if need > cap:
            self._index.resize_index(max(need, 2 * cap))

    # -- search --------------------------------------------------------------------

    def search(
        self,
        vector: np.ndarray,
        k: int,
        *,
        ef: int | None = None,
        allowed: set[int] | None = None,
    ) -> list[tuple[int, float]]:
        """The ``k`` nearest live labels as ``(label, cosine)``, best first.

        ``allowed`` restricts the search to those labels, inside the search (see the module
        doc for how the strategy is chosen). ``k`` is clamped to what can be returned.
        """
        if k <= 0 or not self._live:
            return []
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, self.dim)
        if allowed is not None:
            if not allowed:
                return []
            if len(allowed) <= self.exact_max and self.vector_source is not None:
                return self._exact(query, k, allowed)
            k = min(k, len(allowed))
        k = min(k, len(self._live))
        ef = max(ef or self.ef_search, k)
        if ef != self._ef:
            self._index.set_ef(ef)
            self._ef = ef
        try:
            found, dists = self._index.knn_query(
                query,
                k=k,
                num_threads=1,
                filter=allowed.__contains__ if allowed is not None else None,
            )
        except RuntimeError:
            # Fewer than k reachable results: a filter that passes few live labels, or a
            # graph thinned by deletions. An exact scan always answers.
            return self._exact(query, k, allowed if allowed is not None else self._live)
        # Rounding can put a unit vector's self-similarity a hair above 1.
        return [
            (int(label), min(1.0, 1.0 - float(dist)))
            for label, dist in zip(found[0], dists[0], strict=True)
        ]

    def _exact(self, query: np.ndarray, k: int, allowed: set[int]) -> list[tuple[int, float]]:
        candidates = [label for label in allowed if label in self._live]
        if not candidates:
            return []
        if self.vector_source is not None:
            labels, matrix = self.vector_source(candidates)
        else:
            labels = candidates
            matrix = np.asarray(self._index.get_items(candidates), dtype=np.float32)
        return top_k_exact(labels, matrix, query, k)

    # -- snapshots -----------------------------------------------------------------

    def save(self, directory: Path, seq: int) -> Path:
        """Write a snapshot covering the change log up to ``seq``; drop older ones.

        The ``.hnsw`` file is written to a temp name and renamed; the ``.json`` beside it
        (size, CRC-32, deleted labels) is renamed last, so it is the commit point: a
        snapshot without its JSON, or whose file does not match it, is never loaded. No
        fsync: the index is a cache, and a torn file after a power cut fails the CRC and
        is rebuilt from SQLite.
        """
        directory.mkdir(parents=True, exist_ok=True)
        data_path, meta_path = _snapshot_paths(directory, seq)
        tmp = data_path.with_name(data_path.name + ".tmp")
        try:
            self._index.save_index(str(tmp))
            size = tmp.stat().st_size
            if size < self._least_snapshot_size():
                raise OSError(errno.ENOSPC, f"index snapshot cut short at {size} bytes")
            crc = _file_crc32(tmp)
            os.replace(tmp, data_path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a full disk must not keep the half-written file
            raise
        in_table = set(self._index.get_ids_list())
        meta = {
            "format": SNAPSHOT_FORMAT,
            "seq": seq,
            "dim": self.dim,
            "size": size,
            "crc32": crc,
            "element_count": self._index.element_count,
            "live_count": len(self._live),
            "deleted": sorted(in_table - self._live),
        }
        _write_atomic(meta_path, json.dumps(meta).encode())
        self._dead &= in_table
        prune_snapshots(directory, keep_seq=seq)
        return data_path

    def _least_snapshot_size(self) -> int:
        """The fewest bytes a complete snapshot of this index has.

        hnswlib reports no write error: on a full disk ``save_index`` leaves a truncated
        file and returns, and its checksum, taken afterwards, would have made that file
        the snapshot (and pruned the good one before it). Its format writes a 96-byte
        header, then per element the level-0 record (2M links and their count, the
        vector, the label) and a link-list size, then the upper-level links, which are
        under 1% of the file at 384 dimensions.
        """
        per_element = (2 * self._index.M * 4 + 4) + self.dim * 4 + 8 + 4
        return 96 + self._index.element_count * per_element

    @classmethod
    def load(
        cls,
        directory: Path,
        dim: int,
        *,
        max_seq: int | None = None,
        **kwargs,
    ) -> tuple[VectorIndex, int] | None:
        """The newest valid snapshot (at most ``max_seq``) and the seq it covers, or None.

        Anything wrong with a snapshot (missing file, size or CRC mismatch, hnswlib
        refusing it, wrong dimension) is logged and means "try an older one / rebuild".
        """
        for seq, meta_path in sorted(_list_metas(directory), reverse=True):
            if max_seq is not None and seq > max_seq:
                log.warning("index snapshot newer than the change log, ignored", seq=seq)
                continue
            try:
                return cls._load_one(directory, seq, meta_path, dim, **kwargs), seq
            except Exception as exc:  # any failure means rebuild, never a crash
                log.warning("index snapshot unusable", seq=seq, error=str(exc))
        return None

    @classmethod
    def _load_one(
        cls, directory: Path, seq: int, meta_path: Path, dim: int, **kwargs
    ) -> VectorIndex:
        meta = json.loads(meta_path.read_text())
        data_path, _ = _snapshot_paths(directory, seq)
        if meta.get("format") != SNAPSHOT_FORMAT or meta.get("dim") != dim:
            raise ValueError(f"format {meta.get('format')} / dim {meta.get('dim')} not ours")
        if data_path.stat().st_size != meta["size"] or _file_crc32(data_path) != meta["crc32"]:
            raise ValueError("index file does not match its checksum")
        raw = hnswlib.Index(space="ip", dim=dim)
        raw.load_index(str(data_path), allow_replace_deleted=True)
        if raw.element_count != meta["element_count"]:
            raise ValueError("element count does not match the snapshot's metadata")
        index = cls(dim, _index=raw, **kwargs)
        deleted = {int(x) for x in meta["deleted"]}
        index._live = set(raw.get_ids_list()) - deleted
        index._dead = deleted
        if len(index._live) != meta["live_count"]:
            raise ValueError("live count does not match the snapshot's metadata")
        return index


def _list_metas(directory: Path) -> list[tuple[int, Path]]:
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        match = _META_RE.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return found


def prune_snapshots(directory: Path, keep_seq: int) -> None:
    """Delete every snapshot file and leftover temp file except the one for ``keep_seq``."""
    keep = {p.name for p in _snapshot_paths(directory, keep_seq)}
    for path in directory.iterdir():
        if path.name.startswith("index-") and path.name not in keep:
            with contextlib.suppress(OSError):
                path.unlink()
