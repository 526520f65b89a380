/*
 * barrierflow's decoder of flat JSON records (compiled by barrierflow.jvm.helper against the Spark
 * jars PySpark ships; used by a Kafka source read through Spark's connector with format: json).
 *
 * A Catalyst expression of two children: the record's bytes (BinaryType) and Spark's own decoding
 * of the same record (from_json of the value as a string, to the same struct). It returns what
 * that second child returns, for every input: records it is sure to read exactly as from_json
 * does it decodes itself, straight from the bytes (no copy to a string, no Jackson parser per
 * record); on anything else it evaluates the second child, so Spark decides. It decodes itself:
 * one top-level object of well-formed UTF-8 (a record with a byte >= 0x80 is validated once;
 * an ASCII record costs no more than the scan for such a byte), whitespace as JSON allows it,
 * keys with or without escapes, each wanted field at most once, and every wanted field either
 * null or of its type's plain form: a string, its escapes decoded (\" \\ \/ \b \f \n \r \t
 * and \\uXXXX, a surrogate pair to its 4-byte character and a lone surrogate to '?', as Spark's
 * re-encoding of Jackson's text gives it; for a string field, a canonical integer is also read as
 * its text, as from_json does), an integer of at most 18 digits without leading zeros (long), a
 * JSON number (double; parsed as Double.parseDouble does, correctly rounded as Jackson's parser
 * is), true or false (boolean). Other fields are skipped, nested values included. Malformed
 * UTF-8 anywhere (Java's reader replaces it), a key that matches a field only when case is
 * ignored, a key with a lone surrogate, a number too long, nesting deeper than 32 levels, a
 * record over 16 MiB: Spark decides. Fields may be string, long (bigint), double or boolean.
 */
package barrierflow.jvm;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.function.Function;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeBlock;
import org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator;
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext;
import org.apache.spark.sql.catalyst.expressions.codegen.ExprCode;
import org.apache.spark.sql.catalyst.expressions.codegen.JavaCode;
import org.apache.spark.sql.classic.ExpressionUtils;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

public final class FlatJsonDecoder extends Expression implements Function<Object, Object>, Serializable {
  private static final long serialVersionUID = 1L;
  static final int STRING = 0, LONG = 1, DOUBLE = 2, BOOLEAN = 3;
  /** Nesting a skipped value may have before Spark decides. */
  static final int MAX_DEPTH = 32;
  /** Characters a number may have before Spark decides. */
  static final int MAX_NUMBER = 40;
  /** Bytes a record may have before Spark decides (below Jackson's limit of a string's length). */
  static final int MAX_RECORD = 1 << 24;

  private final Expression value;
  private final Expression fallback;
  private final StructType schema;
  private final byte[][] names;
  private final String[] plainNames;
  private final String[] lowerNames;
  private final int[] kinds;
  /** Whether every field name is ASCII (then an ASCII key is compared without a String). */
  private final boolean asciiNames;

  /** The expression (the constructor Catalyst's makeCopy finds: the product's three elements). */
  public FlatJsonDecoder(Expression value, Expression fallback, StructType schema) {
    this.value = value;
    this.fallback = fallback;
    this.schema = schema;
    StructField[] fields = schema.fields();
    if (fields.length > 64) throw new IllegalArgumentException("at most 64 JSON fields, got " + fields.length);
    names = new byte[fields.length][];
    plainNames = new String[fields.length];
    lowerNames = new String[fields.length];
    kinds = new int[fields.length];
    boolean ascii = true;
    for (int f = 0; f < fields.length; f++) {
      names[f] = fields[f].name().getBytes(StandardCharsets.UTF_8);
      plainNames[f] = fields[f].name();
      lowerNames[f] = fields[f].name().toLowerCase(Locale.ROOT);
      for (byte c : names[f]) if (c < 0) ascii = false;
      DataType type = fields[f].dataType();
      if (type instanceof StringType) kinds[f] = STRING;
      else if (type instanceof LongType) kinds[f] = LONG;
      else if (type instanceof DoubleType) kinds[f] = DOUBLE;
      else if (type instanceof BooleanType) kinds[f] = BOOLEAN;
      else throw new IllegalArgumentException("JSON field " + fields[f].name() + " of type " + type.simpleString()
          + " is not supported (string, bigint, double, boolean)");
    }
    asciiNames = ascii;
  }

  /** The decoding of binary column {@code value}, Spark's {@code fallback} decoding (to struct {@code schemaJson}) where it must decide. */
  public static Column column(Column value, Column fallback, String schemaJson) {
    StructType schema = (StructType) DataType.fromJson(schemaJson);
    return ExpressionUtils.column(new FlatJsonDecoder(ExpressionUtils.expression(value),
        ExpressionUtils.expression(fallback), schema));
  }

  // ------------------------------------------------------------------------------ the decoding

  /** The struct of {@code bytes} (a byte[]) as an InternalRow, or null when Spark must decide. */
  @Override
  public Object apply(Object bytes) {
    return decode((byte[]) bytes);
  }

  InternalRow decode(byte[] b) {
    int n = b.length;
    if (n > MAX_RECORD) return null;
    for (int k = 0; k < n; k++) {
      if (b[k] < 0) {  // not ASCII: well-formed UTF-8 reads as its bytes; Spark's reader replaces the rest
        if (!utf8(b, k)) return null;
        break;
      }
    }
    int i = ws(b, 0);
    if (i >= n || b[i] != '{') return null;
    Object[] out = new Object[kinds.length];
    long seen = 0;
    byte[] keyBytes = null;
    int[] keyLength = null;
    i = ws(b, i + 1);
    if (i < n && b[i] == '}') {
      i++;
    } else {
      while (true) {
        if (i >= n || b[i] != '"') return null;
        int start = i + 1, end = start;
        boolean escaped = false;
        while (end < n && b[end] != '"') {
          if (b[end] == '\\') { escaped = true; break; }
          if (b[end] < 0x20 && b[end] >= 0) return null;
          end++;
        }
        int field;
        if (escaped) {
          if (keyBytes == null) { keyBytes = new byte[n]; keyLength = new int[1]; }
          end = unescape(b, start, keyBytes, keyLength, true);
          if (end < 0) return null;
          field = field(keyBytes, 0, keyLength[0]);
          end--;  // the closing quote
        } else {
          if (end >= n) return null;
          field = field(b, start, end);
        }
        if (field == -2) return null;
        i = ws(b, end + 1);
        if (i >= n || b[i] != ':') return null;
        i = ws(b, i + 1);
        if (i >= n) return null;
        if (field >= 0) {
          if ((seen & (1L << field)) != 0) return null;
          seen |= 1L << field;
          i = read(b, i, field, out);
        } else {
          i = skip(b, i, 0);
        }
        if (i < 0) return null;
        i = ws(b, i);
        if (i >= n) return null;
        if (b[i] == ',') { i = ws(b, i + 1); continue; }
        if (b[i] == '}') { i++; break; }
        return null;
      }
    }
    return ws(b, i) == n ? new GenericInternalRow(out) : null;
  }

  /**
   * Whether bytes [from, end) are well-formed UTF-8 (the Unicode standard's table: no overlong
   * form, no surrogate, nothing above U+10FFFF, no sequence cut short); exactly the input Java's
   * UTF-8 reader (Spark's, under Jackson) decodes without replacing anything.
   */
  static boolean utf8(byte[] b, int from) {
    int n = b.length, k = from;
    while (k < n) {
      int c = b[k] & 0xff;
      if (c < 0x80) { k++; continue; }
      int more, low = 0x80, high = 0xbf;
      if (c >= 0xc2 && c <= 0xdf) more = 1;
      else if (c >= 0xe0 && c <= 0xef) {
        more = 2;
        if (c == 0xe0) low = 0xa0;
        else if (c == 0xed) high = 0x9f;
      } else if (c >= 0xf0 && c <= 0xf4) {
        more = 3;
        if (c == 0xf0) low = 0x90;
        else if (c == 0xf4) high = 0x8f;
      } else return false;
      if (k + more >= n) return false;
      int second = b[k + 1] & 0xff;
      if (second < low || second > high) return false;
      for (int m = 2; m <= more; m++) if ((b[k + m] & 0xc0) != 0x80) return false;
      k += more + 1;
    }
    return true;
  }

  private static int hexValue(byte c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  /** The UTF-16 unit of the escape {@code \\uXXXX} at {@code k}, or -1 when there is none. */
  private static int unit(byte[] b, int k) {
    if (k + 5 >= b.length || b[k] != '\\' || b[k + 1] != 'u') return -1;
    int unit = 0;
    for (int m = 2; m < 6; m++) {
      int digit = hexValue(b[k + m]);
      if (digit < 0) return -1;
      unit = unit << 4 | digit;
    }
    return unit;
  }

  /**
   * Decodes the JSON string whose text starts at {@code start} (after its opening quote) into
   * {@code out} as UTF-8, {@code length[0]} its byte count: the index after the closing quote,
   * or -1 when Spark must decide (an unknown escape, a control character, no closing quote, a
   * lone surrogate in a key). A lone surrogate in a value is '?': Jackson's text holds it and
   * Spark's UTF8String.fromString encodes it so. {@code out} has room for the rest of {@code b}
   * (a decoded string is never longer than its text).
   */
  static int unescape(byte[] b, int start, byte[] out, int[] length, boolean key) {
    int n = b.length, k = start, o = 0;
    while (k < n) {
      byte c = b[k];
      if (c == '"') { length[0] = o; return k + 1; }
      if (c < 0x20 && c >= 0) return -1;
      if (c != '\\') { out[o++] = c; k++; continue; }
      if (k + 1 >= n) return -1;
      byte e = b[k + 1];
      switch (e) {
        case '"': case '\\': case '/': out[o++] = e; k += 2; continue;
        case 'b': out[o++] = '\b'; k += 2; continue;
        case 'f': out[o++] = '\f'; k += 2; continue;
        case 'n': out[o++] = '\n'; k += 2; continue;
        case 'r': out[o++] = '\r'; k += 2; continue;
        case 't': out[o++] = '\t'; k += 2; continue;
        case 'u': break;
        default: return -1;
      }
      int u = unit(b, k);
      if (u < 0) return -1;
      k += 6;
      int code = u;
      if (Character.isHighSurrogate((char) u)) {
        int next = unit(b, k);
        if (next >= 0 && Character.isLowSurrogate((char) next)) {
          code = Character.toCodePoint((char) u, (char) next);
          k += 6;
        } else {
          code = -1;
        }
      } else if (Character.isLowSurrogate((char) u)) {
        code = -1;
      }
      if (code < 0) {
        if (key) return -1;
        out[o++] = '?';
      } else if (code < 0x80) {
        out[o++] = (byte) code;
      } else if (code < 0x800) {
        out[o++] = (byte) (0xc0 | code >> 6);
        out[o++] = (byte) (0x80 | code & 0x3f);
      } else if (code < 0x10000) {
        out[o++] = (byte) (0xe0 | code >> 12);
        out[o++] = (byte) (0x80 | code >> 6 & 0x3f);
        out[o++] = (byte) (0x80 | code & 0x3f);
      } else {
        out[o++] = (byte) (0xf0 | code >> 18);
        out[o++] = (byte) (0x80 | code >> 12 & 0x3f);
        out[o++] = (byte) (0x80 | code >> 6 & 0x3f);
        out[o++] = (byte) (0x80 | code & 0x3f);
      }
    }
    return -1;
  }

  private static int ws(byte[] b, int i) {
    while (i < b.length && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t')) i++;
    return i;
  }

  /** The index of the field named by bytes [start, end), -1 for none, -2 for one equal only when case is ignored. */
  private int field(byte[] b, int start, int end) {
    int length = end - start;
    for (int f = 0; f < names.length; f++) {
      byte[] name = names[f];
      if (name.length == length && Arrays.equals(b, start, end, name, 0, length)) return f;
    }
    if (asciiNames) {  // most keys of a record are fields nobody asked for: no String for them
      boolean ascii = true;
      for (int k = start; k < end; k++) if (b[k] < 0) { ascii = false; break; }
      if (ascii) {
        for (byte[] name : names) if (name.length == length && asciiEqualIgnoringCase(b, start, name)) return -2;
        return -1;
      }
    }
    String key = new String(b, start, length, StandardCharsets.UTF_8);
    String lowerKey = key.toLowerCase(Locale.ROOT);
    for (int f = 0; f < names.length; f++) {
      if (lowerNames[f].equals(lowerKey) || plainNames[f].equalsIgnoreCase(key)) return -2;
    }
    return -1;
  }

  /**
   * Whether the ASCII bytes at {@code start} equal ASCII {@code name} when case is ignored: for
   * ASCII text exactly what Java's toLowerCase(Locale.ROOT) and equalsIgnoreCase decide.
   */
  private static boolean asciiEqualIgnoringCase(byte[] b, int start, byte[] name) {
    for (int k = 0; k < name.length; k++) {
      int x = b[start + k], y = name[k];
      if (x == y) continue;
      if (x >= 'A' && x <= 'Z') x += 'a' - 'A';
      if (y >= 'A' && y <= 'Z') y += 'a' - 'A';
      if (x != y) return false;
    }
    return true;
  }

  /** After a token ending at {@code i}: a byte that may follow a value. */
  private static boolean delimited(byte[] b, int i) {
    if (i >= b.length) return true;
    byte c = b[i];
    return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' || c == '\r' || c == '\t';
  }

  private static boolean literal(byte[] b, int i, String word) {
    int n = word.length();
    if (i + n > b.length) return false;
    for (int k = 0; k < n; k++) if (b[i + k] != word.charAt(k)) return false;
    return delimited(b, i + n);
  }

  /** The end of the JSON number at {@code i}, or -1 when there is none; {@code integral[0]} says whether it has no fraction or exponent. */
  private static int number(byte[] b, int i, boolean[] integral) {
    int n = b.length, k = i;
    if (k < n && b[k] == '-') k++;
    if (k >= n) return -1;
    if (b[k] == '0') {
      k++;
    } else if (b[k] >= '1' && b[k] <= '9') {
      while (k < n && b[k] >= '0' && b[k] <= '9') k++;
    } else {
      return -1;
    }
    integral[0] = true;
    if (k < n && b[k] == '.') {
      integral[0] = false;
      int digits = ++k;
      while (k < n && b[k] >= '0' && b[k] <= '9') k++;
      if (k == digits) return -1;
    }
    if (k < n && (b[k] == 'e' || b[k] == 'E')) {
      integral[0] = false;
      k++;
      if (k < n && (b[k] == '+' || b[k] == '-')) k++;
      int digits = k;
      while (k < n && b[k] >= '0' && b[k] <= '9') k++;
      if (k == digits) return -1;
    }
    if (k - i > MAX_NUMBER || !delimited(b, k)) return -1;
    return k;
  }

  /** A canonical integer of at most 18 digits at [i, end): not "-0", no leading zero. */
  private static boolean plainInteger(byte[] b, int i, int end) {
    int digits = end - i - (b[i] == '-' ? 1 : 0);
    if (digits > 18) return false;
    return !(b[i] == '-' && b[i + 1] == '0');
  }

  private static long parseLong(byte[] b, int i, int end) {
    boolean negative = b[i] == '-';
    long result = 0;
    for (int k = negative ? i + 1 : i; k < end; k++) result = result * 10 + (b[k] - '0');
    return negative ? -result : result;
  }

  /** Reads field {@code f}'s value at {@code i} into {@code out}; the index after it, or -1 when Spark must decide. */
  private int read(byte[] b, int i, int f, Object[] out) {
    byte c = b[i];
    if (c == 'n') {
      if (!literal(b, i, "null")) return -1;
      out[f] = null;
      return i + 4;
    }
    switch (kinds[f]) {
      case STRING: {
        if (c == '"') {
          int k = i + 1;
          while (k < b.length && b[k] != '"') {
            if (b[k] == '\\') {  // escapes: the text decoded into bytes of its own
              byte[] text = new byte[b.length - i];
              int[] length = new int[1];
              int end = unescape(b, i + 1, text, length, false);
              if (end < 0) return -1;
              out[f] = UTF8String.fromBytes(text, 0, length[0]);
              return end;
            }
            if (b[k] < 0x20 && b[k] >= 0) return -1;
            k++;
          }
          if (k >= b.length) return -1;
          out[f] = UTF8String.fromBytes(b, i + 1, k - i - 1);
          return k + 1;
        }
        boolean[] integral = new boolean[1];
        int end = number(b, i, integral);
        if (end < 0 || !integral[0] || !plainInteger(b, i, end)) return -1;
        out[f] = UTF8String.fromBytes(b, i, end - i);
        return end;
      }
      case LONG: {
        boolean[] integral = new boolean[1];
        int end = number(b, i, integral);
        if (end < 0 || !integral[0] || !plainInteger(b, i, end)) return -1;
        out[f] = parseLong(b, i, end);
        return end;
      }
      case DOUBLE: {
        boolean[] integral = new boolean[1];
        int end = number(b, i, integral);
        if (end < 0) return -1;
        if (integral[0]) {
          if (!plainInteger(b, i, end)) return -1;
          out[f] = (double) parseLong(b, i, end);
        } else {
          out[f] = Double.parseDouble(new String(b, i, end - i, StandardCharsets.US_ASCII));
        }
        return end;
      }
      default: {
        if (literal(b, i, "true")) { out[f] = Boolean.TRUE; return i + 4; }
        if (literal(b, i, "false")) { out[f] = Boolean.FALSE; return i + 5; }
        return -1;
      }
    }
  }

  /** The index after the JSON value at {@code i} (skipped), or -1 when Spark must decide. */
  private static int skip(byte[] b, int i, int depth) {
    int n = b.length;
    if (i >= n) return -1;
    byte c = b[i];
    if (c == '"') {
      int k = i + 1;
      while (k < n && b[k] != '"') {
        if (b[k] < 0x20 && b[k] >= 0) return -1;
        if (b[k] == '\\') {
          if (k + 1 >= n) return -1;
          byte e = b[k + 1];
          if (e == 'u') {  // a lone surrogate is no error to Jackson, and the value is skipped
            if (unit(b, k) < 0) return -1;
            k += 6;
            continue;
          }
          if ("\"\\/bfnrt".indexOf(e) < 0) return -1;
          k += 2;
          continue;
        }
        k++;
      }
      return k < n ? k + 1 : -1;
    }
    if (c == '{' || c == '[') {
      if (depth >= MAX_DEPTH) return -1;
      byte close = c == '{' ? (byte) '}' : (byte) ']';
      int k = ws(b, i + 1);
      if (k < n && b[k] == close) return k + 1;
      while (true) {
        if (c == '{') {
          if (k >= n || b[k] != '"') return -1;
          k = skip(b, k, depth + 1);
          if (k < 0) return -1;
          k = ws(b, k);
          if (k >= n || b[k] != ':') return -1;
          k = ws(b, k + 1);
        }
        k = skip(b, k, depth + 1);
        if (k < 0) return -1;
        k = ws(b, k);
        if (k >= n) return -1;
        if (b[k] == ',') { k = ws(b, k + 1); continue; }
        if (b[k] == close) return k + 1;
        return -1;
      }
    }
    if (c == 't') return literal(b, i, "true") ? i + 4 : -1;
    if (c == 'f') return literal(b, i, "false") ? i + 5 : -1;
    if (c == 'n') return literal(b, i, "null") ? i + 4 : -1;
    return number(b, i, new boolean[1]);
  }

  // ------------------------------------------------------------------------------ Catalyst

  @Override
  public Object eval(InternalRow input) {
    Object bytes = value.eval(input);
    if (bytes == null) return null;
    Object decoded = decode((byte[]) bytes);
    return decoded != null ? decoded : fallback.eval(input);
  }

  @Override
  public ExprCode doGenCode(CodegenContext ctx, ExprCode ev) {
    ExprCode bytes = value.genCode(ctx);
    ExprCode spark = fallback.genCode(ctx);
    // Referenced as a java.util.function.Function: the generated class never names this one
    // (on the driver it comes from a class loader of its own, which the code's compiler does not see).
    String self = ctx.addReferenceObj("flatJsonDecoder", this, "java.util.function.Function");
    String type = CodeGenerator.javaType(dataType());
    String code = bytes.code() + "\n"
        + "boolean " + ev.isNull() + " = " + bytes.isNull() + ";\n"
        + type + " " + ev.value() + " = null;\n"
        + "if (!" + ev.isNull() + ") {\n"
        + "  " + ev.value() + " = (" + type + ") " + self + ".apply(" + bytes.value() + ");\n"
        + "  if (" + ev.value() + " == null) {\n"
        + "    " + spark.code() + "\n"
        + "    " + ev.isNull() + " = " + spark.isNull() + ";\n"
        + "    " + ev.value() + " = " + spark.value() + ";\n"
        + "  }\n"
        + "}\n";
    List<String> parts = new ArrayList<>();
    parts.add(code);
    Seq<String> codeParts = CollectionConverters.asScala(parts).toList();
    Seq<JavaCode> inputs = CollectionConverters.asScala(new ArrayList<JavaCode>()).toList();
    return ev.copy(new CodeBlock(codeParts, inputs), ev.isNull(), ev.value());
  }

  /**
   * False to the optimizer, though the decoding depends on the record alone: Spark copies a
   * deterministic expression into every place that reads its result (a filter on a decoded field
   * pushed below the projection that decodes, two projections collapsed into one), so each record
   * was decoded once per such place, twice for most queries that filter on a field. Not
   * deterministic, it stays in its own projection and every record is decoded once (as
   * {@code asNondeterministic()} keeps a Python UDF from being called again).
   */
  @Override public boolean deterministic() { return false; }

  @Override public DataType dataType() { return schema; }
  @Override public boolean nullable() { return true; }
  @Override public String prettyName() { return "barrierflow_flat_json"; }

  @Override
  public Seq<Expression> children() {
    List<Expression> both = new ArrayList<>();
    both.add(value);
    both.add(fallback);
    return CollectionConverters.asScala(both).toList();
  }

  @Override
  public Expression withNewChildrenInternal(IndexedSeq<Expression> children) {
    return new FlatJsonDecoder(children.apply(0), children.apply(1), schema);
  }

  @Override public int productArity() { return 3; }

  @Override
  public Object productElement(int n) {
    switch (n) {
      case 0: return value;
      case 1: return fallback;
      case 2: return schema;
      default: throw new IndexOutOfBoundsException(String.valueOf(n));
    }
  }

  @Override public boolean canEqual(Object other) { return other instanceof FlatJsonDecoder; }

  @Override
  public boolean equals(Object other) {
    if (!(other instanceof FlatJsonDecoder)) return false;
    FlatJsonDecoder that = (FlatJsonDecoder) other;
    return value.equals(that.value) && fallback.equals(that.fallback) && schema.equals(that.schema);
  }

  @Override public int hashCode() { return java.util.Objects.hash(value, fallback, schema); }
}
