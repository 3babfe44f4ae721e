"""Word lists of the generated catalog: shop categories, product types, attributes, options.

Each product type belongs to one of WebShop's five shop categories, has the search query
it is listed under, a breadcrumb, the attributes a product of that type may have, and its
option kinds. The lists are small on purpose: many products share a type and most of their
attributes, so an agent has to read titles, options and prices to find the right one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProductType:
    """A kind of product: ``noun`` (title word), ``query``, breadcrumb, attributes, options."""

    noun: str
    query: str
    breadcrumb: tuple[str, ...]
    attributes: tuple[str, ...]
    options: tuple[str, ...]


COLORS = (
    "black", "white", "navy blue", "red", "grey", "green", "pink", "beige", "brown",
    "purple", "yellow", "light blue", "dark green", "orange", "khaki", "teal", "burgundy",
    "silver", "gold", "ivory",
)  # fmt: skip

OPTION_VALUES: dict[str, tuple[str, ...]] = {
    "color": COLORS,
    "size": ("x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large"),
    "shoe size": tuple(str(n) for n in (6, 6.5, 7, 7.5, 8, 8.5, 9, 9.5, 10, 10.5, 11, 12)),
    "pack size": ("1 count", "2 count", "pack of 3", "pack of 6", "pack of 12", "pack of 24"),
    "flavor name": (
        "vanilla", "chocolate", "strawberry", "original", "sea salt", "honey", "lemon",
        "cinnamon", "peppermint", "mango",
    ),
    "scent": ("lavender", "unscented", "eucalyptus", "rose", "coconut", "citrus", "sandalwood"),
    "style": ("modern", "classic", "rustic", "minimalist", "vintage", "industrial"),
    "capacity": ("8 oz", "12 oz", "16 oz", "20 oz", "32 oz", "40 oz"),
}  # fmt: skip

_CLOTHING = ("color", "size")
PRODUCT_TYPES: tuple[ProductType, ...] = (
    ProductType(
        "sneakers",
        "men's sneakers",
        ("Clothing, Shoes & Jewelry", "Men", "Shoes", "Fashion Sneakers"),
        ("rubber sole", "non slip", "lace up", "breathable mesh", "memory foam", "arch support"),
        ("color", "shoe size"),
    ),
    ProductType(
        "sandals",
        "women's sandals",
        ("Clothing, Shoes & Jewelry", "Women", "Shoes", "Sandals"),
        (
            "open toe",
            "ankle strap",
            "rubber sole",
            "arch support",
            "memory foam",
            "water resistant",
        ),
        ("color", "shoe size"),
    ),
    ProductType(
        "hoodie",
        "men's hoodies",
        ("Clothing, Shoes & Jewelry", "Men", "Clothing", "Hoodies"),
        (
            "machine wash",
            "long sleeve",
            "cotton blend",
            "relaxed fit",
            "fleece lined",
            "drawstring closure",
        ),
        _CLOTHING,
    ),
    ProductType(
        "dress",
        "women's dresses",
        ("Clothing, Shoes & Jewelry", "Women", "Clothing", "Dresses"),
        (
            "machine wash",
            "short sleeve",
            "polyester spandex",
            "slim fit",
            "hand wash",
            "elastic waist",
        ),
        _CLOTHING,
    ),
    ProductType(
        "leggings",
        "women's leggings",
        ("Clothing, Shoes & Jewelry", "Women", "Clothing", "Leggings"),
        (
            "high waist",
            "tummy control",
            "butt lift",
            "moisture wicking",
            "machine wash",
            "polyester spandex",
        ),
        _CLOTHING,
    ),
    ProductType(
        "shampoo",
        "shampoo",
        ("Beauty & Personal Care", "Hair Care", "Shampoo & Conditioner", "Shampoos"),
        (
            "sulfate free",
            "paraben free",
            "natural ingredients",
            "tea tree",
            "argan oil",
            "dry hair",
        ),
        ("scent", "pack size"),
    ),
    ProductType(
        "moisturizer",
        "face moisturizer",
        ("Beauty & Personal Care", "Skin Care", "Face", "Moisturizers"),
        (
            "hyaluronic acid",
            "fragrance free",
            "sensitive skin",
            "cruelty free",
            "long lasting",
            "vitamin c",
        ),
        ("scent", "capacity"),
    ),
    ProductType(
        "lipstick",
        "lipstick",
        ("Beauty & Personal Care", "Makeup", "Lips", "Lipstick"),
        (
            "long lasting",
            "cruelty free",
            "paraben free",
            "high pigmented",
            "easy apply",
            "matte finish",
        ),
        ("color", "pack size"),
    ),
    ProductType(
        "headphones",
        "wireless headphones",
        ("Electronics", "Headphones, Earbuds & Accessories", "Headphones", "Over-Ear Headphones"),
        (
            "noise cancelling",
            "wireless bluetooth",
            "long battery life",
            "hands free",
            "high fidelity",
            "easy carry",
        ),
        ("color",),
    ),
    ProductType(
        "charger",
        "phone charger",
        ("Electronics", "Computers & Accessories", "Chargers & Adapters", "Wall Chargers"),
        (
            "fast charging",
            "usb c",
            "easy carry",
            "high speed",
            "plug and play",
            "overcharge protection",
        ),
        ("color", "pack size"),
    ),
    ProductType(
        "speaker",
        "bluetooth speaker",
        (
            "Electronics",
            "Portable Audio & Video",
            "Portable Speakers & Docks",
            "Portable Bluetooth Speakers",
        ),
        (
            "wireless bluetooth",
            "water resistant",
            "stereo sound",
            "long battery life",
            "easy carry",
            "high fidelity",
        ),
        ("color",),
    ),
    ProductType(
        "webcam",
        "hd webcam",
        ("Electronics", "Computers & Accessories", "Computer Accessories", "Webcams"),
        (
            "plug and play",
            "high definition",
            "noise reduction",
            "wide angle",
            "auto focus",
            "easy install",
        ),
        ("color",),
    ),
    ProductType(
        "sofa",
        "living room sofa",
        ("Home & Kitchen", "Furniture", "Living Room Furniture", "Sofas & Couches"),
        (
            "easy assemble",
            "solid wood",
            "high density",
            "living room",
            "mid century",
            "faux leather",
        ),
        ("color", "style"),
    ),
    ProductType(
        "curtains",
        "blackout curtains",
        ("Home & Kitchen", "Home Decor", "Window Treatments", "Curtains & Drapes"),
        (
            "machine washable",
            "thermal insulated",
            "living room",
            "room darkening",
            "easy install",
            "noise reducing",
        ),
        ("color", "size"),
    ),
    ProductType(
        "lamp",
        "table lamp",
        ("Tools & Home Improvement", "Lighting & Ceiling Fans", "Lamps & Shades", "Table Lamps"),
        (
            "energy efficient",
            "living room",
            "easy assemble",
            "dimmable light",
            "usb port",
            "bedside table",
        ),
        ("color", "style"),
    ),
    ProductType(
        "tumbler",
        "insulated tumbler",
        ("Home & Kitchen", "Kitchen & Dining", "Travel & To-Go Drinkware", "Tumblers"),
        (
            "bpa free",
            "stainless steel",
            "dishwasher safe",
            "leak proof",
            "double wall",
            "easy clean",
        ),
        ("color", "capacity"),
    ),
    ProductType(
        "granola",
        "granola",
        ("Grocery & Gourmet Food", "Breakfast Foods", "Cereals", "Granola"),
        ("gluten free", "non gmo", "high protein", "low sugar", "plant based", "whole grain"),
        ("flavor name", "pack size"),
    ),
    ProductType(
        "coffee",
        "ground coffee",
        ("Grocery & Gourmet Food", "Beverages", "Coffee, Tea & Cocoa", "Ground Coffee"),
        (
            "medium roast",
            "fair trade",
            "usda organic",
            "single origin",
            "dark roast",
            "kosher certified",
        ),
        ("flavor name", "pack size"),
    ),
    ProductType(
        "protein bars",
        "protein bars",
        ("Grocery & Gourmet Food", "Snack Foods", "Bars", "Protein Bars"),
        ("gluten free", "high protein", "low carb", "keto friendly", "non gmo", "low sugar"),
        ("flavor name", "pack size"),
    ),
    ProductType(
        "tea",
        "herbal tea",
        ("Grocery & Gourmet Food", "Beverages", "Coffee, Tea & Cocoa", "Herbal Tea"),
        (
            "caffeine free",
            "usda organic",
            "non gmo",
            "individually wrapped",
            "kosher certified",
            "sugar free",
        ),
        ("flavor name", "pack size"),
    ),
)

CATEGORY_OF: dict[str, str] = {
    "Clothing, Shoes & Jewelry": "fashion",
    "Beauty & Personal Care": "beauty",
    "Electronics": "electronics",
    "Home & Kitchen": "garden",
    "Tools & Home Improvement": "garden",
    "Grocery & Gourmet Food": "grocery",
}

BRANDS = (
    "Lumora", "Vexa", "Oakridge", "Nimbus", "Corvia", "Halden", "Brisa", "Taloni", "Quill",
    "Mirelle", "Zento", "Aurex", "Pellam", "Sora", "Kindra", "Veloce", "Ambry", "Tesso",
    "Rovan", "Elmstead", "Finch", "Galvan", "Hollis", "Ivara",
)  # fmt: skip

MODIFIERS = (
    "Classic", "Everyday", "Premium", "Essential", "Signature", "Deluxe", "Ultra", "Pro",
    "Lite", "Original", "Plus", "Select",
)  # fmt: skip

DESCRIPTION_OPENERS = (
    "Designed for everyday use,",
    "Made to last,",
    "Loved by our customers,",
    "A customer favorite,",
    "Built with care,",
)
