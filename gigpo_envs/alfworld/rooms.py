"""The four ALFRED room kinds: which receptacles and objects a plausible room of each holds.

Receptacle and object type names are ALFRED's (``alfworld.gen.constants``); which object may
go in which receptacle, and which objects can be cleaned, heated or cooled, come from the
same constants at generation time. The counts and lists here are this project's choices,
modelled on the AI2-THOR floor plans that ALFRED uses (kitchens 1-30, living rooms 201-230,
bedrooms 301-330, bathrooms 401-430).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RoomKind:
    """What a room of one kind may contain.

    Attributes:
      name: ``"kitchen"``, ``"livingroom"``, ``"bedroom"`` or ``"bathroom"``.
      scene_base: ALFRED's floor plan numbers of this kind are ``scene_base + 1 .. + 30``.
      receptacles: ``(receptacle type, fewest, most)`` per receptacle type.
      objects: object types that may lie in the room.
      lamp_holders: receptacle types a desk lamp may stand on (empty: no lamps here).
    """

    name: str
    scene_base: int
    receptacles: tuple[tuple[str, int, int], ...]
    objects: tuple[str, ...]
    lamp_holders: tuple[str, ...] = ()


KITCHEN = RoomKind(
    name="kitchen",
    scene_base=0,
    receptacles=(
        ("Cabinet", 2, 6),
        ("CoffeeMachine", 1, 1),
        ("CounterTop", 1, 3),
        ("DiningTable", 0, 1),
        ("Drawer", 1, 4),
        ("Fridge", 1, 1),
        ("GarbageCan", 1, 1),
        ("Microwave", 1, 1),
        ("Shelf", 0, 2),
        ("SinkBasin", 1, 1),
        ("StoveBurner", 2, 4),
        ("Toaster", 0, 1),
    ),
    objects=(
        "Apple",
        "Bowl",
        "Bread",
        "ButterKnife",
        "Cup",
        "DishSponge",
        "Egg",
        "Fork",
        "Kettle",
        "Knife",
        "Ladle",
        "Lettuce",
        "Mug",
        "Pan",
        "PepperShaker",
        "Plate",
        "Pot",
        "Potato",
        "SaltShaker",
        "SoapBottle",
        "Spatula",
        "Spoon",
        "Tomato",
        "WineBottle",
    ),
)

LIVING_ROOM = RoomKind(
    name="livingroom",
    scene_base=200,
    receptacles=(
        ("ArmChair", 0, 2),
        ("Cabinet", 0, 2),
        ("CoffeeTable", 1, 1),
        ("DiningTable", 0, 1),
        ("Drawer", 0, 3),
        ("Dresser", 0, 1),
        ("GarbageCan", 1, 1),
        ("Ottoman", 0, 1),
        ("Safe", 0, 1),
        ("Shelf", 0, 3),
        ("SideTable", 1, 2),
        ("Sofa", 1, 1),
        ("TVStand", 0, 1),
    ),
    objects=(
        "Book",
        "Bowl",
        "Box",
        "Candle",
        "CellPhone",
        "CreditCard",
        "KeyChain",
        "Laptop",
        "Newspaper",
        "Pillow",
        "Plate",
        "RemoteControl",
        "Statue",
        "TissueBox",
        "Vase",
        "Watch",
        "WateringCan",
    ),
    lamp_holders=("SideTable", "Dresser"),
)

BEDROOM = RoomKind(
    name="bedroom",
    scene_base=300,
    receptacles=(
        ("ArmChair", 0, 1),
        ("Bed", 1, 1),
        ("Desk", 0, 1),
        ("Drawer", 2, 5),
        ("Dresser", 1, 1),
        ("GarbageCan", 1, 1),
        ("LaundryHamper", 0, 1),
        ("Safe", 0, 1),
        ("Shelf", 1, 3),
        ("SideTable", 1, 2),
    ),
    objects=(
        "AlarmClock",
        "BaseballBat",
        "BasketBall",
        "Book",
        "Bowl",
        "CD",
        "CellPhone",
        "Cloth",
        "CreditCard",
        "KeyChain",
        "Laptop",
        "Mug",
        "Pen",
        "Pencil",
        "Pillow",
        "Statue",
        "TennisRacket",
        "TissueBox",
        "Vase",
        "Watch",
    ),
    lamp_holders=("Desk", "SideTable", "Dresser"),
)

BATHROOM = RoomKind(
    name="bathroom",
    scene_base=400,
    receptacles=(
        ("BathtubBasin", 0, 1),
        ("Cabinet", 2, 4),
        ("CounterTop", 1, 1),
        ("Drawer", 0, 2),
        ("GarbageCan", 1, 1),
        ("HandTowelHolder", 1, 1),
        ("Shelf", 0, 1),
        ("SinkBasin", 1, 2),
        ("Toilet", 1, 1),
        ("ToiletPaperHanger", 1, 1),
        ("TowelHolder", 1, 1),
    ),
    objects=(
        "Candle",
        "Cloth",
        "DishSponge",
        "HandTowel",
        "Plunger",
        "SoapBar",
        "SoapBottle",
        "SprayBottle",
        "TissueBox",
        "ToiletPaper",
        "Towel",
    ),
)

ROOM_KINDS: dict[str, RoomKind] = {
    room.name: room for room in (KITCHEN, LIVING_ROOM, BEDROOM, BATHROOM)
}

#: The room kinds in which ALFRED poses each task type (``alfworld.gen.constants.GOALS_VALID``).
TASK_ROOMS: dict[str, tuple[str, ...]] = {
    "pick_and_place_simple": ("kitchen", "livingroom", "bedroom", "bathroom"),
    "look_at_obj_in_light": ("livingroom", "bedroom"),
    "pick_clean_then_place_in_recep": ("kitchen", "bathroom"),
    "pick_heat_then_place_in_recep": ("kitchen",),
    "pick_cool_then_place_in_recep": ("kitchen",),
    "pick_two_obj_and_place": ("kitchen", "livingroom", "bedroom", "bathroom"),
}

#: Receptacles whose object ids carry a "basin" part, as in ALFRED ("Sink|...|SinkBasin").
BASIN_PARENTS = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}
