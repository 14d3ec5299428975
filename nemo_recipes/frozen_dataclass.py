"""`frozen_dataclass`: `@dataclass(frozen=True)` for the classes on the fast CLI path, built in a fifth of the time.

The standard decorator compiles six functions from source for every frozen class (`__init__`, `__repr__`, `__eq__`,
`__hash__`, `__setattr__`, `__delattr__`), each inside a wrapper that passes every field's type and default: about
half a millisecond a class, and the 29 classes that `plan` imports spent 19 ms of its start-up in the compiler.
The fields are read here as the standard decorator reads them (bases first, annotations in order, defaults, `field`,
`KW_ONLY`), without the `dataclasses` module: it imports `inspect`, 6 ms of `plan`'s start-up. This module's own
`field`, `fields`, `replace` and `asdict` serve the fast path; the standard records (`__dataclass_fields__`,
`__dataclass_params__`) are made when something first reads them, so `dataclasses.fields`, `replace`, `asdict`,
`is_dataclass` and standard subclasses work as before. `__init__` is compiled from a short source (the same
parameters, defaults, default factories and `__post_init__` call, writing the fields into the instance's `__dict__`
where the standard frozen `__init__` puts them through `object.__setattr__`, at half the cost); the other five are
shared functions that read the field names from the class, with the standard ones' results: equality and hash of the
same tuple of compared fields, `Name(field=value, ...)` with `...` for a recursive reference, and
`FrozenInstanceError` on assigning or deleting an attribute. Not supported (a TypeError says so): `InitVar`,
`ClassVar` and string `KW_ONLY` annotations, and a class that defines its own `__eq__`, `__hash__`, `__repr__`,
`__setattr__` or `__delattr__`.
"""

from __future__ import annotations

import sys
from operator import attrgetter
from typing import Any, Callable, Mapping, Optional, TypeVar, dataclass_transform, overload

T = TypeVar("T", bound=type)
O = TypeVar("O")


class _Missing:
    """No default (the standard `dataclasses.MISSING`, which the fast path does not import)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Field:
    """One field of a frozen class: what `dataclasses.Field` records of it, for the fields our decorator makes."""

    __slots__ = ("name", "type", "default", "default_factory", "init", "repr", "hash", "compare", "metadata", "kw_only")

    def __init__(
        self,
        default: Any,
        default_factory: Any,
        init: bool,
        repr: bool,
        hash: Optional[bool],
        compare: bool,
        metadata: Optional[Mapping[Any, Any]],
        kw_only: Any,
    ):
        self.name: str = ""
        self.type: Any = None
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.repr = repr
        self.hash = hash
        self.compare = compare
        self.metadata = {} if metadata is None else metadata
        self.kw_only = kw_only

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, type={self.type!r}, default={self.default!r})"


def field(
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    init: bool = True,
    repr: bool = True,
    hash: Optional[bool] = None,
    compare: bool = True,
    metadata: Optional[Mapping[Any, Any]] = None,
    kw_only: Any = MISSING,
) -> Any:
    """`dataclasses.field` for a `frozen_dataclass`."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return Field(default, default_factory, init, repr, hash, compare, metadata, kw_only)


def fields(class_or_instance: Any) -> tuple[Field, ...]:
    """`dataclasses.fields` of a `frozen_dataclass` class or instance."""
    try:
        return class_or_instance.__frozen_fields__
    except AttributeError:
        raise TypeError("must be called with a frozen_dataclass type or instance") from None


def replace(obj: O, /, **changes: Any) -> O:
    """`dataclasses.replace` of a `frozen_dataclass` instance: a new one through `__init__`, with `changes`."""
    for f in fields(obj):
        if not f.init:
            if f.name in changes:
                raise ValueError(f"field {f.name} is declared with init=False, it cannot be specified with replace()")
        elif f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)


_ATOMIC = (type(None), bool, int, float, complex, str, bytes)


def asdict(obj: Any) -> dict[str, Any]:
    """`dataclasses.asdict` of a `frozen_dataclass` instance: fields, nested ones, lists, tuples and dicts copied."""
    return _plain(obj)


def _plain(obj: Any) -> Any:
    own = getattr(type(obj), "__frozen_fields__", None)
    if own is not None:
        return {f.name: _plain(getattr(obj, f.name)) for f in own}
    if type(obj) in _ATOMIC:  # what `copy.deepcopy` returns as it is
        return obj
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*[_plain(v) for v in obj])
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((_plain(k), _plain(v)) for k, v in obj.items())
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    import copy

    return copy.deepcopy(obj)


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


def _init(cls: type, fields: tuple[Field, ...]) -> Callable[..., None]:
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
            from dataclasses import FrozenInstanceError

            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            from dataclasses import FrozenInstanceError

            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    __setattr__.__qualname__ = f"{cls.__qualname__}.__setattr__"
    __delattr__.__qualname__ = f"{cls.__qualname__}.__delattr__"
    return __setattr__, __delattr__


# Annotations that the standard decorator reads as something other than a field.
_UNSUPPORTED = ("InitVar", "ClassVar", "KW_ONLY")


def _collect(cls: Any, kw_only: bool) -> tuple[Field, ...]:
    """The fields of `cls` as the standard decorator finds them: its bases' first (in method resolution order), then
    its own annotations in order, each with its default or `field(...)` (the standard `dataclasses.field` too), and
    `KW_ONLY`; the class attribute of a field is its default, as the standard decorator leaves it."""
    found: dict[str, Field] = {}
    for base in cls.__mro__[-1:0:-1]:
        inherited = base.__dict__.get("__frozen_fields__")
        if inherited is None and "__dataclass_fields__" in base.__dict__:
            inherited = [_ours(f) for f in _standard().fields(base)]
        for f in inherited or ():
            found[f.name] = f
    standard = sys.modules.get("dataclasses")  # a standard field or KW_ONLY in the body means it is imported
    after_marker = False
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if standard is not None and annotation is standard.KW_ONLY:
            after_marker = True
            continue
        special = isinstance(annotation, str) and annotation.split("[")[0].split(".")[-1] in _UNSUPPORTED
        initvar = standard is not None and (annotation is standard.InitVar or isinstance(annotation, standard.InitVar))
        if special or initvar:
            raise TypeError(f"{cls.__qualname__} has an InitVar, ClassVar or KW_ONLY field: use dataclasses.dataclass")
        value = cls.__dict__.get(name, MISSING)
        if isinstance(value, Field):
            f = value
        elif standard is not None and isinstance(value, standard.Field):
            f = _ours(value)
        else:
            f = field(default=value)
        f.name, f.type = name, annotation
        if f.kw_only is MISSING:
            f.kw_only = kw_only or after_marker
        if f.default is not MISSING and f.default.__class__.__hash__ is None:
            raise ValueError(f"mutable default {type(f.default)} for field {name} is not allowed: use default_factory")
        if value is not f.default:
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        found[name] = f
    return tuple(found.values())


def _standard() -> Any:
    import dataclasses

    return dataclasses


def _ours(standard_field: Any) -> Field:
    """A standard `dataclasses.Field` as ours."""
    missing = _standard().MISSING
    f = field(
        default=MISSING if standard_field.default is missing else standard_field.default,
        default_factory=MISSING if standard_field.default_factory is missing else standard_field.default_factory,
        init=standard_field.init,
        repr=standard_field.repr,
        hash=standard_field.hash,
        compare=standard_field.compare,
        metadata=standard_field.metadata,
        kw_only=MISSING if standard_field.kw_only is missing else standard_field.kw_only,
    )
    f.name, f.type = standard_field.name, standard_field.type
    return f


class _StandardRecord:
    """`__dataclass_fields__` or `__dataclass_params__` of one frozen class, made from its fields when first read
    (by `dataclasses.fields`, `replace`, `asdict`, `is_dataclass` or a standard subclass), so that the CLI's fast
    path never imports `dataclasses` (and the `inspect` module it imports: 6 ms of `plan`'s start-up)."""

    def __init__(self, owner: Any, kw_only: bool, name: str):
        self.owner = owner
        self.kw_only = kw_only
        self.name = name

    def __get__(self, instance: Any, cls: Any = None) -> Any:
        owner = self.owner
        if isinstance(owner.__dict__.get("__dataclass_fields__"), _StandardRecord):
            dataclasses = _standard()
            records = {}
            for f in owner.__frozen_fields__:
                record = dataclasses.field(
                    default=dataclasses.MISSING if f.default is MISSING else f.default,
                    default_factory=dataclasses.MISSING if f.default_factory is MISSING else f.default_factory,
                    init=f.init,
                    repr=f.repr,
                    hash=f.hash,
                    compare=f.compare,
                    metadata=f.metadata or None,
                    kw_only=f.kw_only,
                )
                record.name, record.type = f.name, f.type
                record._field_type = dataclasses._FIELD  # private (3.11-3.13): a plain field, not a ClassVar or InitVar
                records[f.name] = record
            # The parameters as the standard decorator records them (a frozen dataclass may only be subclassed by a
            # frozen one), from an empty class it decorates alike.
            params = dataclasses.dataclass(frozen=True, kw_only=self.kw_only)(type(owner.__name__, (), {}))
            type.__setattr__(owner, "__dataclass_fields__", records)
            type.__setattr__(owner, "__dataclass_params__", params.__dataclass_params__)
        return owner.__dict__[self.name]


@overload
@dataclass_transform(frozen_default=True, kw_only_default=False, field_specifiers=(field, Field))
def frozen_dataclass(cls: T, /, *, kw_only: bool = False) -> T: ...


@overload
@dataclass_transform(frozen_default=True, kw_only_default=False, field_specifiers=(field, Field))
def frozen_dataclass(cls: None = None, /, *, kw_only: bool = False) -> Callable[[T], T]: ...


# type checkers see a frozen dataclass
@dataclass_transform(frozen_default=True, kw_only_default=False, field_specifiers=(field, Field))
def frozen_dataclass(cls: Any = None, /, *, kw_only: bool = False) -> Any:
    """`@dataclass(frozen=True)` (with `kw_only`); see the module's docstring for what it does not support."""

    def wrap(cls: Any) -> Any:
        own = _OWN & set(cls.__dict__)
        if own:
            raise TypeError(f"{cls.__qualname__} defines {sorted(own)}: use dataclasses.dataclass")
        documented = cls.__dict__.get("__doc__") is not None
        fields = _collect(cls, kw_only)
        cls.__frozen_fields__ = fields
        for record in ("__dataclass_fields__", "__dataclass_params__"):
            setattr(cls, record, _StandardRecord(cls, kw_only, record))
        if "__match_args__" not in cls.__dict__:
            type.__setattr__(cls, "__match_args__", tuple(f.name for f in fields if f.init and not f.kw_only))
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
