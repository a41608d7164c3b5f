// Writes proto/buf/validate/validate.proto from the descriptor that the @bufbuild/protovalidate npm
// package ships (gen/buf/validate/validate_pb.js), so the vendored file is exactly the protovalidate
// version the service validates with. The Buf Schema Registry (buf.yaml deps) is out of reach from
// this project's machines; the npm registry is not. Comments are not part of an embedded
// descriptor, so the printed file has none beyond this provenance header.
//
//   npx tsx scripts/vendor-validate-proto.ts && npx buf generate
import { writeFileSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { getExtension, hasExtension, isFieldSet } from '@bufbuild/protobuf';
import {
  FieldDescriptorProtoSchema,
  FieldDescriptorProto_Label,
  FieldDescriptorProto_Type,
  type DescriptorProto,
  type EnumDescriptorProto,
  type FieldDescriptorProto,
  type FieldOptions,
  type OneofDescriptorProto,
} from '@bufbuild/protobuf/wkt';
import { file_buf_validate_validate, oneof as oneofExt, predefined, type Rule } from '@bufbuild/protovalidate/gen/buf/validate/validate_pb.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
const pkgJson = join(dirname(require.resolve('@bufbuild/protovalidate')).replace(/dist[\\/](esm|cjs)$/, ''), 'package.json');
const version = (JSON.parse(readFileSync(pkgJson, 'utf8')) as { version: string }).version;
const file = file_buf_validate_validate.proto;

const q = (s: string) => JSON.stringify(s);
const TYPE_NAMES: Partial<Record<FieldDescriptorProto_Type, string>> = {
  [FieldDescriptorProto_Type.DOUBLE]: 'double',
  [FieldDescriptorProto_Type.FLOAT]: 'float',
  [FieldDescriptorProto_Type.INT64]: 'int64',
  [FieldDescriptorProto_Type.UINT64]: 'uint64',
  [FieldDescriptorProto_Type.INT32]: 'int32',
  [FieldDescriptorProto_Type.FIXED64]: 'fixed64',
  [FieldDescriptorProto_Type.FIXED32]: 'fixed32',
  [FieldDescriptorProto_Type.BOOL]: 'bool',
  [FieldDescriptorProto_Type.STRING]: 'string',
  [FieldDescriptorProto_Type.BYTES]: 'bytes',
  [FieldDescriptorProto_Type.UINT32]: 'uint32',
  [FieldDescriptorProto_Type.SFIXED32]: 'sfixed32',
  [FieldDescriptorProto_Type.SFIXED64]: 'sfixed64',
  [FieldDescriptorProto_Type.SINT32]: 'sint32',
  [FieldDescriptorProto_Type.SINT64]: 'sint64',
};
const typeOf = (f: FieldDescriptorProto) => TYPE_NAMES[f.type] ?? f.typeName;

function ruleText(r: Rule): string {
  const parts: string[] = [];
  if (r.id) parts.push(`id: ${q(r.id)}`);
  if (r.message) parts.push(`message: ${q(r.message)}`);
  parts.push(`expression: ${q(r.expression)}`);
  return `{\n${parts.map((p) => `      ${p}`).join('\n')}\n    }`;
}

function fieldOptions(f: FieldDescriptorProto): string {
  const opts: string[] = [];
  const o = f.options as FieldOptions | undefined;
  if (o) {
    if (o.deprecated) opts.push('deprecated = true');
    if (hasExtension(o, predefined)) for (const r of getExtension(o, predefined).cel) opts.push(`(predefined).cel = ${ruleText(r)}`);
  }
  if (isFieldSet(f, FieldDescriptorProtoSchema.field.defaultValue)) opts.push(`default = ${f.type === FieldDescriptorProto_Type.STRING ? q(f.defaultValue) : f.defaultValue}`);
  return opts.length ? ` [\n    ${opts.join(',\n    ')}\n  ]` : '';
}

function field(f: FieldDescriptorProto, indent: string, inOneof: boolean): string {
  const label = inOneof ? '' : f.label === FieldDescriptorProto_Label.REPEATED ? 'repeated ' : f.label === FieldDescriptorProto_Label.REQUIRED ? 'required ' : 'optional ';
  return `${indent}${label}${typeOf(f)} ${f.name} = ${f.number}${fieldOptions(f).replace(/\n/g, `\n${indent}`)};`;
}

function oneofBlock(o: OneofDescriptorProto, fields: FieldDescriptorProto[]): string[] {
  const out = [`  oneof ${o.name} {`];
  if (o.options && hasExtension(o.options, oneofExt) && getExtension(o.options, oneofExt).required) out.push('    option (buf.validate.oneof).required = true;');
  for (const f of fields) out.push(field(f, '    ', true));
  out.push('  }');
  return out;
}

function message(m: DescriptorProto): string[] {
  const out = [`message ${m.name} {`];
  const done = new Set<number>();
  m.field.forEach((f, i) => {
    if (done.has(i)) return;
    if (isFieldSet(f, FieldDescriptorProtoSchema.field.oneofIndex) && !f.proto3Optional) {
      const idx = f.oneofIndex;
      const members = m.field.map((x, j) => [x, j] as const).filter(([x]) => isFieldSet(x, FieldDescriptorProtoSchema.field.oneofIndex) && x.oneofIndex === idx);
      members.forEach(([, j]) => done.add(j));
      out.push(...oneofBlock(m.oneofDecl[idx]!, members.map(([x]) => x)));
      return;
    }
    out.push(field(f, '  ', false));
  });
  for (const r of m.reservedRange) out.push(`  reserved ${r.end - 1 === r.start ? r.start : `${r.start} to ${r.end - 1}`};`);
  if (m.reservedName.length) out.push(`  reserved ${m.reservedName.map(q).join(', ')};`);
  for (const r of m.extensionRange) out.push(`  extensions ${r.start} to ${r.end >= 536870912 ? 'max' : r.end - 1};`);
  out.push('}');
  return out;
}

function enumBlock(e: EnumDescriptorProto): string[] {
  const out = [`enum ${e.name} {`, ...e.value.map((v) => `  ${v.name} = ${v.number};`)];
  // Enum reserved ranges are inclusive at both ends.
  for (const r of e.reservedRange) out.push(`  reserved ${r.end === r.start ? r.start : `${r.start} to ${r.end}`};`);
  if (e.reservedName.length) out.push(`  reserved ${e.reservedName.map(q).join(', ')};`);
  out.push('}');
  return out;
}

const lines: string[] = [
  `// Vendored from the npm package @bufbuild/protovalidate ${version} (Apache-2.0, Copyright Buf`,
  '// Technologies, Inc.): printed from the descriptor it ships by scripts/vendor-validate-proto.ts.',
  '// Upstream documents every rule at https://protovalidate.com. Do not edit; re-run the script.',
  '',
  'syntax = "proto2";',
  '',
  `package ${file.package};`,
  '',
  ...file.dependency.map((d) => `import ${q(d)};`),
  '',
  `option go_package = ${q(file.options!.goPackage)};`,
  `option java_multiple_files = true;`,
  `option java_outer_classname = ${q(file.options!.javaOuterClassname)};`,
  `option java_package = ${q(file.options!.javaPackage)};`,
  '',
];
const byExtendee = new Map<string, FieldDescriptorProto[]>();
for (const x of file.extension) byExtendee.set(x.extendee, [...(byExtendee.get(x.extendee) ?? []), x]);
for (const [extendee, exts] of byExtendee) {
  lines.push(`extend ${extendee.slice(1)} {`, ...exts.map((x) => field(x, '  ', false)), '}', '');
}
for (const m of file.messageType) lines.push(...message(m), '');
for (const e of file.enumType) lines.push(...enumBlock(e), '');

const out = join(root, 'proto/buf/validate/validate.proto');
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, lines.join('\n').replace(/\n+$/, '\n'));
console.log(`wrote ${out}`);
