"""`frozen_dataclass`: `@dataclass(frozen=True)` for the classes on the fast CLI path, built in a fifth of the time.

The standard decorator compiles six functions from source for every frozen class (`__init__`, `__repr__`, `__eq__`,
`__hash__`, `__setattr__`, `__delattr__`), each inside a wrapper that passes every field's type and default: about
half a millisecond a class, and the 29 classes that `plan` imports spent 19 ms of its start-up in the compiler.
Here `dataclasses` still reads the fields (`dataclasses.fields`, `replace`, `asdict` work as before); `__init__` is
compiled from a short source (the same parameters, defaults, default factories and `__post_init__` call, with the
fields written into the instance's `__dict__`, where the standard frozen `__init__` puts them through
`object.__setattr__`, at half the cost); the other five are shared
functions that read the field names from the class, with the standard ones' results: equality and hash of the same
tuple of compared fields, `Name(field=value, ...)` with `...` for a recursive reference, and `FrozenInstanceError`
on assigning or deleting an attribute. Not supported (a TypeError says so): `InitVar` fields, and a class that
defines its own `__eq__`, `__hash__`, `__repr__`, `__setattr__` or `__delattr__`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, FrozenInstanceError
from operator import attrgetter
from typing import Any, Callable, TypeVar, dataclass_transform, overload

T = TypeVar("T", bound=type)

_REPR_RUNNING: set[tuple[int, int]] = set()
_OWN = {"__eq__", "__hash__", "__repr__", "__setattr__", "__delattr__"}


class _Factory:
    """The default of a parameter whose field has a default factory (shown as the standard `__init__` shows it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _tuple_of(names: tuple[str, ...]) -> Callable[[Any], tuple]:
    """The values of `names` as a tuple (attrgetter gives a bare value for one name)."""
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        get = attrgetter(names[0])
        return lambda obj: (get(obj),)
    return attrgetter(*names)


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        compared = self.__class__.__dataclass_compared__
        return compared(self) == compared(other)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self.__class__.__dataclass_hashed__(self))


def _repr(self: Any) -> str:
    import _thread

    key = (id(self), _thread.get_ident())
    if key in _REPR_RUNNING:
        return "..."
    _REPR_RUNNING.add(key)
    try:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__class__.__dataclass_shown__)
        return f"{self.__class__.__qualname__}({shown})"
    finally:
        _REPR_RUNNING.discard(key)


def _init(cls: type, fields: tuple[dataclasses.Field, ...]) -> Callable[..., None]:
    """The standard frozen `__init__`'s behaviour: positional then keyword-only parameters in field order, defaults,
    default factories (called per instance, also for fields outside `__init__`), then `__post_init__()`."""
    namespace: dict[str, Any] = {"__name__": cls.__module__, "_set": object.__setattr__, "_FACTORY": _FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    lines = []
    defaulted = False
    # Into the instance's dict, as `object.__setattr__` would put them but at half the cost (a plan search lays out
    # hundreds of objects); through `object.__setattr__` where the class has slots.
    slotted = hasattr(cls, "__slots__")
    for i, f in enumerate(fields):
        value = f.name
        if f.default_factory is not MISSING:
            namespace[f"_factory{i}"] = f.default_factory
            value = f"_factory{i}() if {f.name} is _FACTORY else {f.name}" if f.init else f"_factory{i}()"
            param = f"{f.name}=_FACTORY"
        elif f.default is not MISSING:
            namespace[f"_default{i}"] = f.default
            value = f.name if f.init else f"_default{i}"
            param = f"{f.name}=_default{i}"
        elif not f.init:
            continue
        else:
            param = f.name
            if defaulted and not f.kw_only:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
        if f.init:
            (keyword if f.kw_only else positional).append(param)
            defaulted = defaulted or (param != f.name and not f.kw_only)
        lines.append(f"_set(self, {f.name!r}, {value})" if slotted else f"_values[{f.name!r}] = {value}")
    if lines and not slotted:
        lines.insert(0, "_values = self.__dict__")
    if hasattr(cls, "__post_init__"):
        lines.append("self.__post_init__()")
    signature = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    exec(f"def __init__({signature}):\n" + "".join(f"    {line}\n" for line in lines or ["pass"]), namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**{f.name: f.type for f in fields if f.init}, "return": None}
    return init


def _frozen_guards(cls: Any, names: tuple[str, ...]) -> tuple[Callable, Callable]:
    """The standard frozen `__setattr__` and `__delattr__`: a field, or any attribute of an instance of the class
    itself, cannot be assigned or deleted; a subclass's own attributes go through."""

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    __setattr__.__qualname__ = f"{cls.__qualname__}.__setattr__"
    __delattr__.__qualname__ = f"{cls.__qualname__}.__delattr__"
    return __setattr__, __delattr__


@overload
@dataclass_transform(frozen_default=True, kw_only_default=False)
def frozen_dataclass(cls: T, /, *, kw_only: bool = False) -> T: ...


@overload
@dataclass_transform(frozen_default=True, kw_only_default=False)
def frozen_dataclass(cls: None = None, /, *, kw_only: bool = False) -> Callable[[T], T]: ...


@dataclass_transform(frozen_default=True, kw_only_default=False)  # type checkers see a frozen dataclass
def frozen_dataclass(cls: Any = None, /, *, kw_only: bool = False) -> Any:
    """`@dataclass(frozen=True)` (with `kw_only`); see the module's docstring for what it does not support."""

    def wrap(cls: Any) -> Any:
        own = _OWN & set(cls.__dict__)
        if own:
            raise TypeError(f"{cls.__qualname__} defines {sorted(own)}: use dataclasses.dataclass")
        documented = cls.__dict__.get("__doc__") is not None
        # Fields only: the methods are made here. The parameters then say what the class is, as the standard
        # decorator records them (a frozen dataclass may only be subclassed by a frozen one).
        cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)
        params = cls.__dataclass_params__
        params.init = params.repr = params.eq = params.frozen = True
        initvar = dataclasses._FIELD_INITVAR  # type: ignore[attr-defined]  # private (3.11-3.13): InitVars leave fields()
        if any(f._field_type is initvar for f in cls.__dataclass_fields__.values()):
            raise TypeError(f"{cls.__qualname__} has an InitVar: use dataclasses.dataclass")
        fields = dataclasses.fields(cls)
        cls.__init__ = _init(cls, fields)
        cls.__setattr__, cls.__delattr__ = _frozen_guards(cls, tuple(f.name for f in fields))
        cls.__dataclass_compared__ = staticmethod(_tuple_of(tuple(f.name for f in fields if f.compare)))
        hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
        cls.__dataclass_hashed__ = staticmethod(_tuple_of(hashed))
        cls.__dataclass_shown__ = tuple(f.name for f in fields if f.repr)
        cls.__eq__ = _eq
        cls.__hash__ = _hash
        cls.__repr__ = _repr
        if not documented:  # the standard decorator's docstring: the class's signature
            import inspect

            cls.__doc__ = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")
        return cls

    return wrap if cls is None else wrap(cls)
