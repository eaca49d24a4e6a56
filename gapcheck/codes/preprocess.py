"""Finding codes of preprocess-audit: the same raw samples through train / val / inference preprocessing."""
from gapcheck.codes import define
from gapcheck.findings import Severity

F = "preprocess-audit"

CHANNEL_ORDER = define("channel_order", Severity.GAP, F, "Channel order differs (BGR vs RGB)",
    "One stage's output is another's with its channels permuted, e.g. OpenCV decodes BGR while PIL decodes RGB.",
    "Convert with cv2.cvtColor(img, cv2.COLOR_BGR2RGB) (or the reverse) in the stage that differs.")
LAYOUT = define("layout", Severity.GAP, F, "Layout differs (HWC vs CHW)",
    "The same values arranged in another axis order: one stage feeds HWC where the other feeds CHW.",
    "Transpose with .permute(2, 0, 1) / np.transpose in the stage that differs.")
SCALE = define("scale", Severity.GAP, F, "Value scale differs (/255 missing or doubled)",
    "One stage's values are a constant multiple of the other's, typically a missing or repeated division by 255.",
    "Apply the same scaling (ToTensor divides by 255; ToImage + ToDtype(scale=True) too) in every stage.")
NORMALIZATION = define("normalization", Severity.GAP, F, "Normalization constants differ",
    "The stages differ by a per-channel affine map; the implied mean/std of the other stage are reported.",
    "Use the same mean/std (e.g. ImageNet's 0.485,0.456,0.406 / 0.229,0.224,0.225) everywhere.")
RESIZE = define("resize", Severity.GAP, F, "Resize differs (library, interpolation or antialias)",
    "The difference is reproduced by resizing with another backend/interpolation/antialias; the method that "
    "reproduces it is named, with whether antialias was on. Several methods give the same pixels on some images "
    "(an exact 2x downscale: bilinear without antialias equals a box filter), so evidence comes from samples "
    "that separate the candidates; when none does, every candidate is listed and the finding says so.",
    "Resize with the same library, interpolation and antialias setting in every stage.")
CROP = define("crop", Severity.GAP, F, "Crop differs",
    "The stages crop different regions (center vs corner, crop after vs before resize).",
    "Use the same crop (size and position) in every stage.")
DTYPE = define("dtype", Severity.GAP, F, "Output dtype differs",
    "The stages hand the model different dtypes (uint8 vs float32, float16 vs float32).",
    "Convert to the dtype the model was trained with in every stage.")
SHAPE = define("shape", Severity.GAP, F, "Output shape differs",
    "The stages produce tensors of different shapes, so they cannot feed the same model the same way.",
    "Align resize/crop sizes and batch dimensions between stages.")
UNEXPLAINED = define("unexplained", Severity.GAP, F, "Stages differ for no identified reason",
    "The outputs differ beyond tolerance and none of the known root causes reproduces the difference.",
    "Compare the stages step by step (declare them as step lists to get the first divergent step).")
STAGE_ERROR = define("stage_error", Severity.GAP, F, "A stage failed on a sample",
    "A stage raised on a sample, or killed the worker process running it (os._exit, a segfault in a C "
    "extension: the cause is then 'worker died' with the exit status); the stage, the sample and the error are "
    "named, and the other samples are still audited.",
    "Run the stage on the named sample to reproduce, and fix the stage or exclude the sample explicitly.")
NONFINITE_OUTPUT = define("nonfinite_output", Severity.GAP, F, "A stage outputs NaN or infinity",
    "A stage's output holds non-finite values (NaN, +inf, -inf) on some samples, e.g. a division by a zero std "
    "or a log of zero; the model would see them. Samples where a stage outputs them are left out of the stage-pair "
    "comparison and its root-cause diagnoses (no resize or normalization can be replayed on NaN).",
    "Find the operation that produces them on the named sample (a zero std, an empty crop, a 0/0) and guard it.")
NONDETERMINISTIC = define("nondeterministic", Severity.GAP, F, "A stage is nondeterministic",
    "Running the same stage twice on the same sample gives different outputs: random augmentation left on in a "
    "validation or inference stage (a warning for a stage declared augmented).",
    "Remove random transforms from validation/inference, or seed them and declare the stage augmented.")
DISTRIBUTION_SHIFT = define("distribution_shift", Severity.WARNING, F, "Per-channel distributions differ between stages",
    "A two-sample KS test per channel finds a significant difference with an effect above the minimum.",
    "Look at the histograms in the HTML report; usually a normalization or resize difference named elsewhere.")
UNREADABLE = define("unreadable", Severity.WARNING, F, "A sample cannot be read",
    "The entry cannot be read as a file (permissions, a broken link, a symlink loop) or is not a regular file "
    "(a FIFO, a socket, a device). Special files are never opened (opening a FIFO would block); the entry is "
    "listed with the reason, skipped and counted.",
    "Remove it from the sample set or fix its permissions.")
NOT_IMAGE = define("not_image", Severity.WARNING, F, "A sample is not an image",
    "The file is not a recognised image format; it is skipped and counted.",
    "Remove non-image files from the sample directory.")
CORRUPT_IMAGE = define("corrupt_image", Severity.WARNING, F, "A sample is a corrupt or truncated image",
    "The image header is readable but decoding fails; it is skipped and counted.",
    "Re-export the image or drop it from the data set.")
DECOMPRESSION_BOMB = define("decompression_bomb", Severity.WARNING, F, "A sample declares too many pixels",
    "The image declares more pixels than the configured limit (a decompression bomb); it is never decoded.",
    "Check the file; raise the pixel limit only for trusted data.")
GRAYSCALE_INPUT = define("grayscale_input", Severity.WARNING, F, "A grayscale sample",
    "The sample is single-channel; stages may convert it differently to RGB. Audited, but worth knowing.",
    "Convert to RGB explicitly in every stage.")
ALPHA_INPUT = define("alpha_input", Severity.WARNING, F, "A sample with an alpha channel",
    "The sample has an alpha channel; stages may drop or composite it differently. Audited, but worth knowing.",
    "Convert RGBA to RGB explicitly (and the same way) in every stage.")
HIGH_BIT_DEPTH_INPUT = define("high_bit_depth_input", Severity.WARNING, F, "A 16-bit sample",
    "The sample has more than 8 bits per channel; stages may scale it differently. Audited, but worth knowing.",
    "Convert to 8 bits (or scale by 65535) explicitly in every stage.")
ORIENTATION = define("orientation", Severity.GAP, F, "EXIF orientation applied by one stage only",
    "The raw file carries an EXIF orientation tag and one stage applies it (cv2.imread does, and "
    "ImageOps.exif_transpose) while the other reads the stored pixels (PIL's Image.open does not apply it): the "
    "outputs are rotated or mirrored against each other. Named from the tag of the raw file and by replaying each "
    "stage on the stored and on the oriented image; the finding says which stage applied the tag and on how many "
    "of the differing samples a tag is set.",
    "Apply the tag in every stage (PIL: ImageOps.exif_transpose(img)) or in none (cv2: cv2.IMREAD_IGNORE_ORIENTATION).")
ALPHA_COMPOSITE = define("alpha_composite", Severity.GAP, F, "Transparency handled differently (composite vs drop)",
    "The raw image has transparent pixels; one stage composites them on a background (white or black) and the "
    "other drops the alpha channel (.convert('RGB') keeps the hidden colour under transparent pixels). Replaying "
    "each stage on each reading names which does what.",
    "Handle alpha the same way everywhere, e.g. composite on the same background before converting to RGB.")
PALETTE_INDICES = define("palette_indices", Severity.GAP, F, "A palette image read as colour indices",
    "The raw file is a palette (mode P) PNG/GIF; one stage reads its palette indices (np.asarray(Image.open(p)) "
    "without .convert('RGB')) instead of the colours they stand for.",
    "Convert with .convert('RGB') (or cv2.imread, which looks the palette up) before using the pixels.")
SIZE_ROUNDING = define("size_rounding", Severity.GAP, F, "Resized size rounded differently (int vs round)",
    "A shorter-side resize computes the longer side as shorter·long/short; one stage truncates it with int() (as "
    "torchvision does) and the other rounds it with round(), so on images where the fraction is ≥ .5 the resized "
    "image is one pixel larger and every crop and pixel shifts. Only samples with such a fraction differ.",
    "Compute the resized size the same way in every stage (torchvision's Resize(int) truncates).")
